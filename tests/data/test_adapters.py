"""hpcdgnn.data.adapters: datasets from arrays, PyG's TemporalData and PyG Temporal's signals, written as
``prepare`` writes them (``inspect --json`` of the result against the source), and refused in one line when the
source cannot be represented (nothing written)."""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hpcdgnn.__main__ import main
from hpcdgnn.data.adapters import from_arrays, from_signal, from_temporal_data
from hpcdgnn.errors import DataError
from tests.conftest import mpi_env, read_metrics, run_in_process, write_job

E, N = 400, 37


def _events(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, N, E), rng.integers(0, N, E), np.sort(rng.integers(0, 10_000, E))


def _inspect(path, capsys) -> dict:
    assert main(["inspect", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_arrays_give_the_dataset_prepare_gives_for_the_same_file(tmp_path, capsys):
    src, dst, t = _events()
    src[0], dst[0] = N - 1, 0  # every id 0..N-1 appears: prepare's remap keeps N
    raw = tmp_path / "edges.txt"
    raw.write_text("".join(f"{a} {b} {c}\n" for a, b, c in zip(src, dst, t, strict=True)))
    assert main(["prepare", str(raw), "--format", "snap", "--snapshots", "6", "--output", str(tmp_path / "file")]) == 0
    m = from_arrays(torch.from_numpy(src), dst.tolist(), t, tmp_path / "arrays", snapshots=6, num_vertices=N)
    capsys.readouterr()
    a, b = _inspect(tmp_path / "arrays", capsys), _inspect(tmp_path / "file", capsys)
    assert (m.num_vertices, m.num_snapshots) == (a["num_vertices"], a["num_snapshots"])
    for key in ("num_vertices", "num_snapshots", "num_features", "nnz", "edges", "valid"):
        assert a[key] == b[key], key
    assert a["edges"]["total"] == len({(x, y, k) for x, y, k in zip(src, dst, np.minimum(t * 6 // t.max(), 5),
                                                                      strict=True)})


def test_arrays_as_an_event_stream_keep_every_event_and_its_features(tmp_path, capsys):
    src, dst, t = _events(1)
    feats = np.random.default_rng(2).standard_normal((E, 3)).astype(np.float32)
    m = from_arrays(src, dst, t, tmp_path / "ev", kind="events", edge_features=feats, split=[0.6, 0.2, 0.2])
    info = _inspect(tmp_path / "ev", capsys)
    assert info["num_events"] == m.num_events == E and info["edge_feature_dim"] == 3
    assert info["num_vertices"] == int(max(src.max(), dst.max())) + 1
    assert m.split["train"] == (0, 240)


def test_temporal_data_and_a_signal_train(tmp_path):
    """Both adapters' datasets train (one rank, in this process): their format is prepare's."""
    src, dst, t = _events(3)
    data = SimpleNamespace(src=torch.from_numpy(src), dst=torch.from_numpy(dst), t=torch.from_numpy(t),
                           msg=torch.randn(E, 2), num_nodes=N)  # PyG's TemporalData's attributes
    from_temporal_data(data, tmp_path / "tgn")
    sig = _static_signal()
    from_signal(sig, tmp_path / "sig")
    for name, sections in (("tgn", dict(model={"name": "tgn", "hidden": 8, "heads": 2, "memory_dim": 8,
                                              "time_dim": 4, "neighbors": 4},
                                       task={"name": "temporal_link_prediction", "batch_events": 100,
                                             "eval_negatives": 4}, strategy={"name": "memory"})),
                           ("sig", dict(model={"name": "tgcn"}, task={"name": "regression"},
                                        strategy={"name": "vertex"}))):
        job = write_job(tmp_path / f"{name}.yaml", tmp_path / name, train={"epochs": 2}, **sections)
        proc = run_in_process(["run", str(job), "--output", str(tmp_path / f"run-{name}")], mpi_env(), tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert len(read_metrics(tmp_path / f"run-{name}")) == 2


def _static_signal(steps=6, n=9, f=3, seed=4):
    rng = np.random.default_rng(seed)
    return SimpleNamespace(edge_index=rng.integers(0, n, (2, 20)), edge_weight=rng.uniform(0.5, 1, 20),
                           features=[rng.standard_normal((n, f)) for _ in range(steps)],
                           targets=[rng.standard_normal(n) for _ in range(steps)])


def test_signals_static_and_dynamic_keep_features_and_targets(tmp_path, capsys):
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader

    sig = _static_signal()
    from_signal(sig, tmp_path / "static")
    info = _inspect(tmp_path / "static", capsys)
    assert (info["num_vertices"], info["num_snapshots"], info["num_features"]) == (9, 6, 3)
    m = load_manifest(tmp_path / "static")
    with ShardReader(tmp_path / "static", m) as reader:
        for k in range(6):
            np.testing.assert_allclose(reader.read_targets(k), sig.targets[k])
    rng = np.random.default_rng(5)
    dyn = SimpleNamespace(edge_indices=[rng.integers(0, 9, (2, 5 + k)) for k in range(4)],
                          edge_weights=[None] * 4, features=[rng.standard_normal((9, 2)) for _ in range(4)],
                          targets=[rng.integers(0, 3, 9) for _ in range(4)])
    from_signal(dyn, tmp_path / "dynamic", labels=True)
    info = _inspect(tmp_path / "dynamic", capsys)
    assert (info["num_snapshots"], info["num_classes"]) == (4, 3)
    assert info["edges"]["total"] == sum(len({(a, b) for a, b in e.T}) for e in dyn.edge_indices)


def _windowed(n=5, f=2, steps=24, lags=4, horizon=3, layout="metr-la", independent=False, shuffled_targets=False):
    """PyG Temporal's METR-LA/PEMS-BAY loaders' layout (``_generate_task``) on a random series X (N, F, S):
    ``features[k] = X[:, :, k : k + L]``, ``targets[k] = X[:, 0, k + L : k + L + H]`` (PEMS-BAY: every channel,
    ``X[:, :, ...]``), T = S - L - H + 1 windows; and the series."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((n, f, steps)).astype(np.float32)
    ks = range(steps - lags - horizon + 1)
    features = [rng.standard_normal((n, f, lags)) if independent else x[:, :, k: k + lags] for k in ks]
    future = [x[:, :, k + lags: k + lags + horizon] for k in ks]
    targets = {"metr-la": [y[:, 0] for y in future], "pems-bay": future,
               "scaled": [2 * y[:, 0] + 1 for y in future]}[layout]  # scaled: no feature channel's values
    if shuffled_targets:
        targets = [targets[k] for k in rng.permutation(len(targets))]
    return SimpleNamespace(edge_index=np.array([[0, 1, 2, 3], [1, 2, 3, 4]]), edge_weight=None,
                           features=features, targets=targets, series=x)


@pytest.mark.parametrize(("layout", "channel"), [("metr-la", 0), ("pems-bay", 0), ("scaled", None)])
def test_windowed_features_are_stored_as_the_series_they_were_cut_from(tmp_path, layout, channel):
    """features[k] (N, F, L), windows sliding by one step, were refused as not (N, F): stored as the T + L - 1
    steps of their series, step t's target the value after it (targets[t - L + 1]'s first; none before window 0
    ends), so task.horizon H forecasts targets[k]; the note and the manifest say which settings give the signal's
    task, and whether the targets are a feature channel's next values (not when scaled otherwise)."""
    from hpcdgnn.data.shard_reader import ShardReader

    sig = _windowed(layout=layout)
    with pytest.warns(UserWarning, match=r"windows of L = 4 steps .* stored as the 21 steps .* task\.horizon: 3 "
                                         r".* strategy: \{name: sequences, window: 4\}"):
        m = from_signal(sig, tmp_path / "out")
    assert m.num_snapshots == 18 + 4 - 1 and m.num_features == 2
    assert m.source["windows"] == {"window": 4, "horizon": 3, "windows": 18, "targets_are_channel": channel,
                                   "target_channels": 2 if layout == "pems-bay" else 1}
    with ShardReader(tmp_path / "out", m) as reader:
        for t in range(m.num_snapshots):
            np.testing.assert_array_equal(reader.read(t).x, sig.series[:, :, t])
            y = reader.read_targets(t)
            if t < 3:
                assert np.isnan(y).all()
            else:  # the value after t: targets[k]'s h-th is then step (t + h)'s, as task.horizon reads it
                np.testing.assert_allclose(y, np.asarray(sig.targets[t - 3])[:, 0].reshape(5, -1)[:, 0])
                np.testing.assert_allclose(y, sig.series[:, 0, t + 1] * (2 if layout == "scaled" else 1)
                                           + (layout == "scaled"), rtol=1e-6)


def test_lags_as_features_are_kept_and_windows_take_their_graph_and_labels(tmp_path, recwarn):
    """Lags as (N, lags) features (chickenpox, WikiMath, Windmill: X[k : k + lags].T, the target the next
    value) are the signal's task as they are: one snapshot per step, unchanged, no note. Windows of a dynamic
    graph: step t has the graph of the window ending at t (window 0's before); with labels=True the steps
    before window 0 ends are -1 (no label)."""
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader

    series = np.random.default_rng(9).standard_normal((20, 6))
    lags = SimpleNamespace(edge_index=np.array([[0, 1], [1, 2]]), edge_weight=np.ones(2),
                           features=[series[k: k + 4].T for k in range(16)], targets=[series[k + 4] for k in range(16)])
    m = from_signal(lags, tmp_path / "lags")
    assert (m.num_snapshots, m.num_features) == (16, 4) and "windows" not in m.source and not recwarn.list
    sig = _windowed()
    rng = np.random.default_rng(10)
    graphs = [rng.integers(0, 5, (2, 3)) for _ in sig.features]
    dyn = SimpleNamespace(edge_indices=graphs, edge_weights=[None] * len(graphs), features=sig.features,
                          targets=[np.floor(3 * np.abs(y)).clip(0, 2) for y in sig.targets])
    with pytest.warns(UserWarning, match="windows of L = 4"):
        from_signal(dyn, tmp_path / "dyn", labels=True)
    m = load_manifest(tmp_path / "dyn")
    with ShardReader(tmp_path / "dyn", m) as reader:
        for t in range(m.num_snapshots):
            a, _ = _dense(tmp_path / "dyn", t)
            g = graphs[max(t - 3, 0)]
            assert {tuple(e) for e in np.argwhere(a)} == {(u, v) for u, v in g.T}
            labels = reader.read(t).labels
            assert (labels == -1).all() if t < 3 else np.array_equal(labels, dyn.targets[t - 3][:, 0])


def test_windowed_signal_trains_with_the_settings_the_note_gives(tmp_path):
    """The note's settings (task.horizon H, strategy sequences with window L) train on the unwound series."""
    with pytest.warns(UserWarning, match="windows of L = 4"):
        from_signal(_windowed(), tmp_path / "win")
    job = write_job(tmp_path / "win.yaml", tmp_path / "win", train={"epochs": 2}, model={"name": "tgcn"},
                    task={"name": "regression", "horizon": 3},
                    strategy={"name": "sequences", "window": 4, "batch_vertices": 4})
    proc = run_in_process(["run", str(job), "--output", str(tmp_path / "run")], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert np.isfinite(read_metrics(tmp_path / "run")[-1]["train_mae"])


def test_a_dict_of_a_temporal_data_s_arrays_is_one(tmp_path, capsys):
    """{"src", "dst", "t", "msg"} (TemporalData.to_dict(), with "y") was refused as having no 'src': the same
    event stream as the TemporalData itself; msg as a list of lists too."""
    src, dst, t = _events(11)
    msg = np.random.default_rng(11).standard_normal((E, 2))
    from_temporal_data(SimpleNamespace(src=src, dst=dst, t=t, msg=msg), tmp_path / "object")
    from_temporal_data({"src": src, "dst": dst, "t": t, "msg": msg.tolist(), "y": np.zeros(E)}, tmp_path / "dict")
    a, b = _inspect(tmp_path / "object", capsys), _inspect(tmp_path / "dict", capsys)
    assert a["num_events"] == E and {k: v for k, v in a.items() if k != "root"} == \
        {k: v for k, v in b.items() if k != "root"}
    # prepare's note of a split without test events is told at this line, not inside from_temporal_data
    with pytest.warns(UserWarning, match="no val and no test events") as told:
        from_temporal_data({"src": [0, 1], "dst": [1, 2], "t": [0, 0]}, tmp_path / "one-time")
    assert [w.filename for w in told] == [__file__]


def test_what_a_temporal_data_holds_beyond_events_is_said_not_stored(tmp_path):
    """A TemporalData's node features ``x`` (or any attribute beyond src, dst, t, msg, y) were dropped without a
    word, where its ``to_dict()`` is refused for them: a warning at the caller's line names them."""

    class Temporal(SimpleNamespace):  # a TemporalData's interface: attributes and keys()
        def keys(self):
            return list(vars(self))

    src, dst, t = _events(5)
    with pytest.warns(UserWarning, match=r"/extra: data\.x, data\.node_type not stored: an event stream holds src, "
                                         r"dst, t and msg") as told:
        from_temporal_data(Temporal(src=src, dst=dst, t=t, y=np.zeros(E), x=np.ones((50, 3)), node_type=[0]),
                           tmp_path / "extra")
    assert [w.filename for w in told] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_temporal_data(Temporal(src=src, dst=dst, t=t, y=np.zeros(E)), tmp_path / "plain")


def test_the_real_libraries_when_installed(tmp_path, capsys):
    """PyG's TemporalData and PyG Temporal's signal classes themselves (skipped without the libraries)."""
    pyg = pytest.importorskip("torch_geometric.data", reason="PyTorch Geometric is not installed (an extra)")
    src, dst, t = _events(6)
    from_temporal_data(pyg.TemporalData(src=torch.from_numpy(src), dst=torch.from_numpy(dst),
                                        t=torch.from_numpy(t), msg=torch.randn(E, 4)), tmp_path / "pyg")
    assert _inspect(tmp_path / "pyg", capsys)["num_events"] == E
    pygt = pytest.importorskip("torch_geometric_temporal.signal", reason="PyG Temporal is not installed (an extra)")
    s = _static_signal()
    from_signal(pygt.StaticGraphTemporalSignal(s.edge_index, s.edge_weight, s.features, s.targets), tmp_path / "t")
    assert _inspect(tmp_path / "t", capsys)["num_snapshots"] == 6
    from_signal(pygt.DynamicGraphStaticSignal([s.edge_index] * 6, [s.edge_weight] * 6, s.features[0], s.targets),
                tmp_path / "d")
    assert _inspect(tmp_path / "d", capsys)["num_snapshots"] == 6
    w = _windowed()
    with pytest.warns(UserWarning, match="windows of L = 4"):
        from_signal(pygt.StaticGraphTemporalSignal(w.edge_index, w.edge_weight, w.features, w.targets), tmp_path / "w")
    assert _inspect(tmp_path / "w", capsys)["num_snapshots"] == 21


@pytest.mark.parametrize(("call", "words"), [
    (lambda out: from_arrays([0, 5], [1, 2], [0, 1], out, num_vertices=4), "src: vertex id 5 (at 1) is beyond"),
    (lambda out: from_arrays([0, 1], [1, 2], [3, -1], out), "t: negative time -1"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, np.nan], out), "t: nan at 1 is not a finite time"),
    (lambda out: from_arrays([0, 1], [1], [0, 1], out), "differ in length"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, split=[0.5, 0.25, 0.25]), "applies only to kind='events'"),
    (lambda out: from_signal(SimpleNamespace(edge_index=np.zeros((2, 1), int), edge_weight=None,
                                             features=[np.zeros((3, 2)), np.zeros((4, 2))], targets=[]), out),
     "features[1] has shape (4, 2); step 0's is (3, 2)"),
    (lambda out: from_signal(SimpleNamespace(edge_index=np.array([[0], [7]]), edge_weight=None,
                                             features=[np.zeros((3, 2))], targets=[np.zeros(3)]), out),
     "edge_index[0][1]: vertex id 7 (at 0) is beyond num_vertices 3"),
    # windows of L steps that are not cut from one series (each drawn anew) have no series to unwind into
    (lambda out: from_signal(_windowed(independent=True), out),
     "features[1] is not features[0] one step on (features[0][:, :, 1:] != features[1][:, :, :-1])"),
    (lambda out: from_signal(_windowed(shuffled_targets=True), out), "targets[1] is not targets[0] one step on"),
    (lambda out: from_signal(SimpleNamespace(**{**vars(_windowed()), "targets": [np.zeros((4, 2))] * 18}), out),
     "targets[0] has shape (4, 2), expected (N,), (N, H) or (N, C, H) for N = 5 vertices"),
    (lambda out: from_signal(SimpleNamespace(**{**vars(_windowed()), "features": [np.zeros((5, 2, 4))] +
                                                [np.zeros((5, 2, 3))] * 17}), out),
     "features[1] has shape (5, 2, 3); step 0's is (5, 2, 4) (every window must have the same N, F and L)"),
    (lambda out: from_signal(SimpleNamespace(edge_index=np.zeros((2, 1), int), edge_weight=None,
                                             features=[np.zeros((3, 2, 2, 2))], targets=[]), out),
     "features[0] has shape (3, 2, 2, 2), expected (N, F): one row of features per vertex (one feature as an "
     "(N, 1) array), or (N, F, L): windows of L steps"),
    # a mapping given as a TemporalData: a key it has not is named, not dropped (a misspelt 'dst' lost the edges)
    (lambda out: from_temporal_data({"src": [0, 1], "dest": [1, 2], "t": [0, 1]}, out),
     "from_temporal_data: data['dest']: unknown key; did you mean 'dst'?"),
    (lambda out: from_temporal_data({"src": [0], "dst": [1], "t": [0], "time": [0], "w": [1]}, out),
     "from_temporal_data: data: unknown keys 'time', 'w'; a TemporalData's are src, dst, t, msg, y"),
    (lambda out: from_temporal_data({"src": [0, 1], "dst": [1, 2]}, out),
     "from_temporal_data: data has no 't' key"),
])
def test_what_cannot_be_represented_is_one_line_and_writes_nothing(tmp_path, call, words):
    with pytest.raises(DataError) as e:
        call(tmp_path / "out")
    assert words in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_a_jodie_like_temporal_data_stays_bipartite(tmp_path):
    """Sources numbered first and destinations after them (PyG's JODIE datasets): a bipartite stream, whose
    negatives are drawn from the destinations; an id order that breaks it is refused when asked for."""
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 5, 50), rng.integers(5, 12, 50)
    data = SimpleNamespace(src=torch.from_numpy(src), dst=torch.from_numpy(dst), t=torch.arange(50), msg=None,
                           num_nodes=12)
    m = from_temporal_data(data, tmp_path / "bip")
    assert m.bipartite and m.num_sources == int(src.max()) + 1
    with pytest.raises(DataError, match="bipartite: destination id 0 .* is below the sources'"):
        from_arrays([3, 4], [0, 9], [0, 1], tmp_path / "bad", kind="events", bipartite=True)


def test_a_misspelt_option_is_one_line_naming_it(tmp_path):
    """A keyword no kind of dataset has: the option named with the likely one, nothing written — from the
    adapters and from ``prepare_dataset`` alike (not a TypeError about an internal class)."""
    from hpcdgnn.data.prepare import prepare_dataset

    raw = tmp_path / "raw.txt"
    raw.write_text("0 1 5\n1 2 6\n")
    with pytest.raises(DataError, match=r"^from_arrays: snapshot: unknown option; did you mean 'snapshots'\?$"):
        from_arrays([0, 1], [1, 2], [5, 6], tmp_path / "a", snapshot=2)
    with pytest.raises(DataError, match=r"raw.txt: shard_event: unknown option; did you mean 'shard_events'\?$"):
        prepare_dataset(raw, "snap", tmp_path / "b", kind="events", shard_event=2)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def _dense(path, t):
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader

    m = load_manifest(path)
    with ShardReader(path, m) as reader:
        s = reader.read(t)
    a = np.zeros((m.num_vertices, m.num_vertices))
    rows = np.repeat(np.arange(m.num_vertices), np.diff(s.indptr))
    a[rows, s.indices] = s.weights
    return a, s.x


def test_reversed_edges_store_the_transposed_graph(tmp_path):
    """``reverse_edges`` (``prepare --reverse-edges``): every snapshot's A_t is the transpose of the one stored
    as given (a vertex sums its in-neighbours, PyG's direction), the in/out degree features swap; a signal
    given reversed edges stores the same graph as ``reverse_edges=True``; the manifest records the option; an
    event stream refuses it."""
    rng = np.random.default_rng(2)
    src, dst, t = rng.integers(0, 7, 40), rng.integers(0, 7, 40), np.sort(rng.uniform(0, 10, 40))
    keep = src != dst
    src, dst, t = src[keep], dst[keep], t[keep]
    plain = from_arrays(src, dst, t, tmp_path / "plain", snapshots=3, num_vertices=7)
    rev = from_arrays(src, dst, t, tmp_path / "rev", snapshots=3, num_vertices=7, reverse_edges=True)
    assert rev.source["options"]["reverse_edges"] is True and plain.source["options"]["reverse_edges"] is False
    for k in range(3):
        (a, x), (b, y) = _dense(tmp_path / "plain", k), _dense(tmp_path / "rev", k)
        assert a.any() and not np.array_equal(a, a.T)  # directed: the two differ
        np.testing.assert_array_equal(b, a.T)
        np.testing.assert_array_equal(y, x[:, ::-1])  # in/out degrees swap
    sig = _static_signal()
    from_signal(sig, tmp_path / "sig-rev", reverse_edges=True)
    flipped = SimpleNamespace(**{**vars(sig), "edge_index": sig.edge_index[::-1]})
    from_signal(flipped, tmp_path / "sig-flipped")
    for k in range(2):
        np.testing.assert_array_equal(_dense(tmp_path / "sig-rev", k)[0], _dense(tmp_path / "sig-flipped", k)[0])
    with pytest.raises(DataError, match="reverse_edges=True applies only to kind='snapshots'"):
        from_arrays(src, dst, t, tmp_path / "ev", kind="events", reverse_edges=True)


@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_keyboard_interrupt_just_after_the_hidden_directory_is_made_leaves_nothing(tmp_path, monkeypatch, kind):
    """Python API: Ctrl-C arriving between the hidden ``.out.tmp-*`` directory's creation and the writer's own
    cleanup (here: raised by the call right after it) left the directory behind; no command clears it there."""
    import hpcdgnn.data.events as events
    import hpcdgnn.data.writer as writer

    made = writer.prepare_output_dir

    def stopped(*args, **kwargs):
        made(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(writer if kind == "snapshots" else events, "prepare_output_dir", stopped)
    src, dst, t = _events()
    with pytest.raises(KeyboardInterrupt):
        from_arrays(src, dst, t, tmp_path / "out", kind=kind, **({"snapshots": 3} if kind == "snapshots" else {}))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e300])
def test_features_that_are_not_finite_float32_are_refused_naming_the_vertex(tmp_path, bad):
    """Features of NaN, ±inf or past float32 (1e300) were stored as inf/NaN with exit 0 (``validate`` then refused
    the dataset): the writer names the snapshot, feature and vertex, and leaves nothing."""
    from hpcdgnn.data.writer import RawSnapshot, write_dataset

    x = np.ones((4, 2))
    x[3, 1] = bad
    snaps = [RawSnapshot(np.array([0, 1]), np.array([1, 2]), x=np.ones((4, 2))), RawSnapshot(
        np.array([0, 1]), np.array([1, 2]), x=x)]
    with pytest.raises(DataError) as e:
        write_dataset(tmp_path / "out", snaps, num_vertices=4, feature_names=["a", "b"])
    assert "snapshot 1: feature 1 of vertex 3 is" in str(e.value) and "\n" not in str(e.value), e.value
    assert list(tmp_path.iterdir()) == []


def test_a_dataset_directory_takes_the_umask_s_mode_not_mkdtemp_s(tmp_path):
    """The hidden directory came from mkdtemp (0700) and kept its mode when moved into place: a prepared dataset
    was unreadable to the user's group on a shared file system."""
    import os
    import stat

    old = os.umask(0o027)
    try:
        src, dst, t = _events()
        from_arrays(src, dst, t, tmp_path / "out", snapshots=3)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "out" / "shards").stat().st_mode) == 0o750


def test_the_adapters_warn_of_what_prepare_warns_of(tmp_path, capsys):
    """Snapshots without edges, an event stream without validation or test events: ``prepare`` warns on stderr,
    the adapters with a Python warning in their own keywords (``events_per_snapshot=``, ``split=``)."""
    src, dst, t = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0]), np.array([0, 1, 2, 3])
    raw = tmp_path / "e.txt"
    raw.write_text("".join(f"{a} {b} {c}\n" for a, b, c in zip(src, dst, t, strict=True)))
    assert main(["prepare", str(raw), "--format", "snap", "--snapshots", "100", "--output", str(tmp_path / "f")]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "96 of 100 snapshots have no edges" in err and "(--events-per-snapshot)" in err
    with pytest.warns(UserWarning, match=r"arrays: 96 of 100 snapshots have no edges .* \(events_per_snapshot=\)"):
        from_arrays(src, dst, t, tmp_path / "arrays", snapshots=100)
    with pytest.warns(UserWarning, match=r"ev: no val and no test events .*: give split= a larger share"):
        from_arrays(src, dst, np.zeros(4), tmp_path / "ev", kind="events")
    # events out of time order: prepare's stderr line named from_arrays even from from_temporal_data; a warning
    # naming the dataset now, and nothing on stderr
    capsys.readouterr()
    for i, call in enumerate((lambda out: from_arrays(src, dst, t[::-1].copy(), out, kind="events"),
                              lambda out: from_temporal_data({"src": src, "dst": dst, "t": t[::-1].copy()}, out))):
        with pytest.warns(UserWarning, match=rf"unsorted{i}: 3 adjacent time inversion\(s\) in the input; events "
                                             r"sorted stably by time \(manifest: sorted_input false\)$"):
            assert not call(tmp_path / f"unsorted{i}").sorted_input
    assert "inversion" not in capsys.readouterr().err


def test_sparse_ids_are_refused_by_size_before_an_array_of_n_is_made(tmp_path):
    """N is the largest id + 1: ids ~1e13 raised a raw MemoryError (np.arange(N), 80 TB) instead of the size
    refusal, and ids ~2e7 took 160 MB for it before refusing. The estimate now comes first."""
    import tracemalloc

    with pytest.raises(DataError) as e:
        from_arrays([0, 10**13], [1, 2], [0, 1], tmp_path / "huge", snapshots=5)
    assert "snapshots=5 would write about" in str(e.value) and "over the limit of 2 GiB" in str(e.value)
    assert "allow_large=True" in str(e.value) and "\n" not in str(e.value)
    assert "for 4 distinct vertices: number them densely" in str(e.value)  # what would help here
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="over the limit of 2 GiB"):  # 7 x 17 bytes x 2e7 vertices
            from_arrays([0, 1], [1, 2 * 10**7], [0, 1], tmp_path / "large", snapshots=7)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB allocated before the refusal"
    # an event stream has no size estimate: ids far sparser than its vertices are refused before np.arange(N)
    with pytest.raises(DataError, match=r"vertex ids reach 10,000,000,000,000 for 3 distinct vertices: .* number "
                                        r"them densely"):
        from_arrays([0, 10**13], [1, 1], [0, 1], tmp_path / "ev", kind="events")
    assert list(tmp_path.iterdir()) == []


def _dynamic_signal(weights):
    rng = np.random.default_rng(8)
    return SimpleNamespace(edge_indices=[rng.integers(0, 6, (2, 4)) for _ in weights], edge_weights=weights,
                           features=[rng.standard_normal((6, 2)) for _ in weights],
                           targets=[rng.standard_normal(6) for _ in weights])


@pytest.mark.parametrize(("call", "words"), [
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots=2, weight=[2.0, 3.0]),
     "weight= is given, but weights='ones' stores 1 per edge instead; pass weights='given'"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots=2, weight=[2.0, 3.0], weights="count"),
     "weights='count' stores the event count per edge"),
    (lambda out: from_signal(_dynamic_signal([None, np.ones(4), np.ones(4)]), out),
     "edge_weights[0] is None but edge_weights[1] holds weights"),
    (lambda out: from_signal(_dynamic_signal([np.ones(4), np.ones(4), None]), out),
     "edge_weights[2] is None but edge_weights[0] holds weights"),
])
def test_edge_weights_are_stored_or_refused_never_dropped(tmp_path, call, words):
    """weight= without weights='given' was accepted and every weight stored as 1; a dynamic signal without
    weights at step 0 but with them later was stored with ones (step 0 decided)."""
    with pytest.raises(DataError) as e:
        call(tmp_path / "out")
    assert words in str(e.value) and "\n" not in str(e.value), e.value
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("call", "words"), [
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots=2.5), "snapshots: expected a whole number"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots="5"), "snapshots: expected a whole number"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots=True), "snapshots: expected a whole number"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, events_per_snapshot=1.5),
     "events_per_snapshot: expected a whole number"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, window="5"), "window: expected a number"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots=2, shard_size="2"),
     "shard_size: expected a whole number"),  # as from_signal says it, not "--shard-size must be"
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots=2, undirected="no"),
     "undirected: expected True or False, got 'no'"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, kind="events", bipartite=1),
     "bipartite: expected True or False, got 1"),
    (lambda out: from_signal(_static_signal(), out, labels=1), "labels: expected True or False, got 1"),
    (lambda out: from_signal(_static_signal(), out, reverse_edges="yes"), "reverse_edges: expected True or False"),
    # an output that is no path raised pathlib's TypeError from inside the writer
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], None, snapshots=2),
     "from_arrays: output: NoneType None is not a path"),
    (lambda out: from_signal(_static_signal(), 7), "from_signal: output: int 7 is not a path"),
    (lambda out: from_temporal_data(SimpleNamespace(src=[0, 1], dst=[1, 2], t=[0, 1]), None),
     "from_temporal_data: output: NoneType None is not a path"),
])
def test_arguments_of_the_wrong_type_are_refused_naming_them(tmp_path, call, words):
    """snapshots=2.5 gave T = 2 and "5" was read as 5; a string flag was true (bool("no")): refused as
    num_vertices=300.0 is; so is an output that is not a path."""
    with pytest.raises(DataError) as e:
        call(tmp_path / "out")
    assert words in str(e.value) and "\n" not in str(e.value), e.value
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("adapter", ["arrays", "signal"])
def test_force_no_keeps_an_earlier_dataset(tmp_path, adapter):
    """force="no" replaced an existing dataset (bool("no") is True)."""
    src, dst, t = _events()
    write = (lambda **kw: from_arrays(src, dst, t, tmp_path / "out", snapshots=3, **kw)) if adapter == "arrays" \
        else (lambda **kw: from_signal(_static_signal(), tmp_path / "out", **kw))
    write()
    before = (tmp_path / "out" / "manifest.json").read_bytes()
    with pytest.raises(DataError, match=r"force: expected True or False, got 'no'$"):
        write(force="no")
    assert (tmp_path / "out" / "manifest.json").read_bytes() == before
    write(force=True)


@pytest.mark.parametrize(("call", "words"), [
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out, snapshots=2),
     "choose another output or pass force=True"),
    (lambda out: from_signal(_static_signal(), out), "choose another output or pass force=True"),
    (lambda out: from_arrays([0, 1], [1, 2], [5, 5], out / "x", snapshots=3),
     "all events share one timestamp (5); use snapshots=1 or events_per_snapshot="),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out / "x", snapshots=2, window=3.0),
     "give only one of snapshots=, window=, events_per_snapshot= (got 2)"),
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out / "x", kind="events", undirected=True),
     "undirected=True applies only to kind='snapshots'"),
    # a flag a sentence is about read "time_unit= must be"
    (lambda out: from_arrays([0, 1], [1, 2], [0, 1], out / "x", kind="events", time_unit=-1),
     ": time_unit must be a positive number (got -1)"),
    (lambda out: from_signal(SimpleNamespace(edge_index=np.zeros((2, 1), int), edge_weight=None,
                                             features=[np.zeros(3)], targets=[]), out / "x"),
     "features[0] has shape (3,), expected (N, F)"),
])
def test_messages_name_the_python_arguments_not_prepare_s_flags(tmp_path, capsys, call, words):
    """The shared code's messages said --force, --snapshots 1, --kind snapshots (flags no Python caller has),
    and a 1-D step's "step 0's is (None, None)"; ``prepare`` still prints its flags."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(DataError) as e:
        call(tmp_path / "out")
    assert words in str(e.value) and "--" not in str(e.value) and "None" not in str(e.value), e.value
    raw = tmp_path / "e.txt"
    raw.write_text("0 1 5\n1 2 6\n")
    assert main(["prepare", str(raw), "--format", "snap", "--output", str(tmp_path / "out")]) == 2
    assert "choose another --output or pass --force" in capsys.readouterr().err
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


_SPMD_SCRIPT = """
import sys
from types import SimpleNamespace

import warnings

import numpy as np
from mpi4py import MPI

from hpcdgnn.data.adapters import from_arrays, from_signal, from_temporal_data
from hpcdgnn.errors import DataError

out = sys.argv[1]
rng = np.random.default_rng(0)
src, dst, t = rng.integers(0, 30, 300), rng.integers(0, 30, 300), rng.random(300)
if MPI.COMM_WORLD.rank == 0:  # the guard a script written for MPI has: rank 0 writes, the others wait here
    from_arrays(src, dst, t, out + "/guarded", snapshots=2)
    with warnings.catch_warnings(record=True) as told:  # prepare's note, at this line as at P = 1
        warnings.simplefilter("always")
        from_temporal_data({"src": [0, 1], "dst": [1, 2], "t": [0, 0]}, out + "/one-time")
    print("WARNED HERE", [w.filename == __file__ for w in told], flush=True)
MPI.COMM_WORLD.Barrier()
snaps = from_arrays(src, dst, t, out + "/snaps", snapshots=4)
events = from_temporal_data(SimpleNamespace(src=src, dst=dst, t=t, msg=None, num_nodes=30), out + "/events")
steps = [rng.random((5, 2)) for _ in range(3)]
signal = from_signal(SimpleNamespace(edge_index=np.array([[0, 1], [1, 2]]), edge_weight=None, features=steps,
                                     targets=[s[:, 0] for s in steps]), out + "/signal")
import os
# what every rank returns is also the path of the dataset rank 0 wrote (data.path takes it)
print("WROTE", snaps.num_snapshots, events.num_events, signal.num_snapshots,
      [os.fspath(m) == os.path.abspath(f"{out}/{name}") for m, name in ((snaps, "snaps"), (events, "events"))],
      flush=True)
try:
    from_arrays(src, dst, t, out + "/bad", snapshots=4, num_vertices=3)
except DataError as e:
    print("REFUSED", e, flush=True)
"""


@pytest.mark.mpi
def test_every_rank_calling_an_adapter_writes_the_dataset_once(tmp_path, launcher):
    """``mpirun -np 2 python script.py`` whose ranks all call the adapters (as they all call ``hpcdgnn.train``):
    the two wrote one directory at once (the second refused, or racing the first); rank 0 writes, every rank
    returns the manifest, and an error is every rank's one line. A call guarded by ``if rank == 0`` still
    writes without waiting for the other ranks, and warns at the script's line."""
    script = tmp_path / "script.py"
    script.write_text(_SPMD_SCRIPT)
    proc = launcher.run(2, [str(script), str(tmp_path / "out")], timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("WROTE 4 300 3 [True, True]") == 2, proc.stdout
    assert proc.stdout.count("REFUSED from_arrays: src: vertex id") == 2
    assert proc.stdout.count("WARNED HERE [True]") == 1, proc.stdout
    assert not (tmp_path / "out" / "bad").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["events", "guarded", "one-time", "signal",
                                                                    "snaps"]


def test_a_dynamic_graph_static_signal_gives_every_step_its_one_feature_matrix(tmp_path, capsys):
    """PyG Temporal's ``DynamicGraphStaticSignal`` keeps one ``feature`` (N, F) for all steps; it was refused as
    "the signal has no features"."""
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader

    rng = np.random.default_rng(6)
    sig = SimpleNamespace(edge_indices=[rng.integers(0, 9, (2, 6)) for _ in range(4)], edge_weights=[None] * 4,
                          feature=rng.standard_normal((9, 2)), targets=[rng.standard_normal(9) for _ in range(4)])
    from_signal(sig, tmp_path / "dgs")
    info = _inspect(tmp_path / "dgs", capsys)
    assert (info["num_vertices"], info["num_snapshots"], info["num_features"]) == (9, 4, 2)
    with ShardReader(tmp_path / "dgs", load_manifest(tmp_path / "dgs")) as reader:
        for k in range(4):
            np.testing.assert_allclose(reader.read(k).x, sig.feature.astype(np.float32))
            np.testing.assert_allclose(reader.read_targets(k), sig.targets[k])


def test_datetimes_are_seconds_since_1970(tmp_path, capsys):
    """pandas' times (numpy datetime64, as ``df.time.to_numpy()`` gives them) were refused ("expected numbers, got
    dtype datetime64[ns]"): now read as seconds since 1970-01-01, the dataset the same as from those seconds; a
    NaT (a missing time) and time-zone aware times (an object array) are one line each."""
    from hpcdgnn.data.events import read_events

    src, dst, t = _events(3)
    seconds = 1_700_000_000 + t
    stamps = seconds.astype("datetime64[s]").astype("datetime64[ns]")
    from_arrays(src, dst, seconds, tmp_path / "sec", snapshots=4)
    from_arrays(src, dst, stamps, tmp_path / "dt", snapshots=4)
    capsys.readouterr()
    assert _inspect(tmp_path / "dt", capsys) | {"root": ""} == _inspect(tmp_path / "sec", capsys) | {"root": ""}
    half = stamps + np.timedelta64(500, "ms")  # not whole seconds: float seconds
    from_arrays(src, dst, half, tmp_path / "ev", kind="events")
    np.testing.assert_array_equal(read_events(tmp_path / "ev").t, seconds + 0.5)
    stamps[7] = np.datetime64("NaT")
    with pytest.raises(DataError, match=r"^from_arrays: t: NaT at 7 is not a time$"):
        from_arrays(src, dst, stamps, tmp_path / "nat", snapshots=4)
    aware = np.array([object()] * E)
    with pytest.raises(DataError, match=r"dtype object \(time-zone aware pandas times: \.dt\.tz_convert\(None\)"):
        from_arrays(src, dst, aware, tmp_path / "obj", snapshots=4)
    assert not (tmp_path / "nat").exists() and not (tmp_path / "obj").exists()


class _Rank1:
    """COMM_WORLD as rank 1 sees it: rank 0's words already sent, in order."""

    def __init__(self, *words):
        self.words = list(words)

    def Iprobe(self, source, tag):
        return bool(self.words)

    def recv(self, source, tag):
        return self.words.pop(0)

    def Get_rank(self):
        return 1


def _await_rank_0(world, key: str, name: str):
    """What :func:`hpcdgnn.data.adapters.once_per_job` does on a rank other than 0 (:func:`hpcdgnn.rank_zero.
    on_rank_0`'s part for it), on ``world`` as rank 1."""
    from hpcdgnn.data.adapters import _TAG, _read_back, _words
    from hpcdgnn.rank_zero import await_rank_0

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("hpcdgnn.comm.world.world_rank_size", lambda: (1, 2))
        return await_rank_0(world, _TAG, key, _words(name), lambda written: _read_back(key, name, written))


def test_a_rank_that_cannot_read_rank_0_s_dataset_is_told_rank_0_wrote_it(tmp_path):
    """An output on a node-local directory: rank 0 wrote it, and another node's rank said only "dataset directory
    does not exist", as if the write had failed; now it says rank 0 wrote it and the filesystem must be shared."""
    key = str(tmp_path / "local")
    with pytest.raises(DataError) as e:
        _await_rank_0(_Rank1((key, None), (key, "")), key, "from_arrays")
    assert str(e.value).startswith(f"from_arrays: rank 0 wrote {key}, which rank 1 cannot read ({key}: "), e.value
    assert str(e.value).endswith("output must be on a filesystem every rank reads"), e.value


def test_a_rank_given_another_output_than_rank_0_s_is_told_which_rank_0_wrote(tmp_path, monkeypatch):
    """Each rank given its own output (``f"data{rank}"``): rank 1 waited HPCDGNN_START_TIMEOUT, then said rank 0 did
    not make the call, which it had; now the line names the output rank 0 wrote."""
    monkeypatch.setenv("HPCDGNN_START_TIMEOUT", "0.05")
    mine, theirs = str(tmp_path / "data1"), str(tmp_path / "data0")
    with pytest.raises(DataError) as e:
        _await_rank_0(_Rank1((theirs, None), (theirs, "")), mine, "from_arrays")
    assert f"rank 0 did not start writing {mine} within 0.05 s (HPCDGNN_START_TIMEOUT) (it wrote {theirs}: if in " \
           "this call, every rank must give the same output)" in str(e.value), e.value


@pytest.mark.parametrize("data, options, words", [
    ({"src": [0, 1], "dst": [1, 2], "t": [0, 1], "msg": np.zeros((3, 2))}, {},
     "from_temporal_data: msg: shape (3, 2), expected (2, D)"),
    ({"src": [0, 1], "dst": [1, 2], "t": [0, 1], "msg": [[0.0], [np.nan]]}, {},
     "from_temporal_data: msg: nan at (1, 0) is not a finite number"),
    ({"src": [0, 1, 2], "dst": [1, 2], "t": [0, 1]}, {}, "from_temporal_data: src, dst and t differ in length"),
    (SimpleNamespace(src=[0, 4], dst=[1, 2], t=[0, 1], msg=None, num_nodes=3), {},
     "from_temporal_data: src: vertex id 4 (at 1) is beyond num_vertices 3 (data.num_nodes) (ids are 0 .. N-1)"),
    ({"src": [0, 4], "dst": [1, 2], "t": [0, 1]}, {"num_vertices": 3},
     "from_temporal_data: src: vertex id 4 (at 1) is beyond num_vertices 3 (ids are 0 .. N-1)"),
    ({"src": [0, 1], "dst": [1, 2], "t": [0, 1]}, {"snapshots": 2},
     "(drop the option, or for snapshots from_arrays(..., snapshots=...))"),
    ({"src": [0, 1], "dst": [1, 2], "t": [0, 1]}, {"kind": "snapshots"},
     "from_temporal_data: kind: a TemporalData is an event stream, written as kind='events'"),
])
def test_from_temporal_data_s_errors_name_its_own_arguments(tmp_path, data, options, words):
    """A TemporalData's bad ``msg`` or ids were told in from_arrays' words ("from_arrays: edge_features: ...",
    "beyond num_vertices 3" for data.num_nodes), a function and argument the caller never used; ``kind=`` crashed
    (TypeError: from_arrays got multiple values for it) and ``snapshots=``'s advice was that very ``kind``."""
    with pytest.raises(DataError) as e:
        from_temporal_data(data, tmp_path / "out", **options)
    assert words in str(e.value) and "from_arrays:" not in str(e.value) and "edge_features" not in str(e.value), e
    assert not (tmp_path / "out").exists()
    from_temporal_data({"src": [0, 1], "dst": [1, 2], "t": [0, 1]}, tmp_path / "ok", kind="events")  # as it is


def test_an_output_s_tilde_is_the_home_directory(tmp_path, monkeypatch):
    """``from_arrays(..., "~/data/mine")`` wrote ``./~/data/mine`` in the working directory, where
    ``hpcdgnn.train``'s ``~`` (and a shell's) is the home directory; now the adapters' is too."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    src, dst, t = _events()
    m = from_arrays(src, dst, t, "~/data/mine", snapshots=4)
    e = from_temporal_data({"src": src, "dst": dst, "t": t}, "~/events")
    assert (home / "data" / "mine" / "manifest.json").is_file() and (home / "events").is_dir()
    assert [str(p) for p in (m.path, e.path)] == [str(home / "data" / "mine"), str(home / "events")]
    assert not (work / "~").exists()


def test_bfloat16_tensors_are_read_as_the_float32_values_they_hold(tmp_path):
    """A mixed-precision pipeline's bfloat16 times and edge features (``Tensor.numpy()`` raises a TypeError on them)
    give the dataset their float32 copies give: bfloat16 -> float32 is exact. A dtype numpy lacks that is not
    floating is one DataError line."""
    from hpcdgnn.data.events import load_event_manifest, read_events

    src, dst = torch.tensor([0, 1, 2, 0]), torch.tensor([1, 2, 0, 2])
    t = torch.tensor([0.0, 1.5, 3.0, 256.0], dtype=torch.bfloat16)
    msg = torch.tensor([[0.1, -2.0], [3.3, 0.0], [1e-3, 7.0], [5.5, 1.0]], dtype=torch.bfloat16)
    kw = dict(kind="events", split=[0.5, 0.25, 0.25])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_arrays(src, dst, t, tmp_path / "bf16", edge_features=msg, **kw)
    from_arrays(src, dst, t.float(), tmp_path / "f32", edge_features=msg.float(), **kw)
    got, want = (read_events(tmp_path / d, load_event_manifest(tmp_path / d), 0, 4) for d in ("bf16", "f32"))
    for key in ("src", "dst", "t", "efeat"):
        np.testing.assert_array_equal(getattr(got, key), getattr(want, key))
    assert got.t[1] == 1.5 and got.efeat[1, 0] == np.float32(3.296875)  # bfloat16's 3.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "ComplexHalf support is experimental"
        half = torch.zeros(4, dtype=torch.complex32)
    with pytest.raises(DataError, match=r"from_arrays: t: torch dtype torch.complex32 has no numpy equivalent"):
        from_arrays(src, dst, half, tmp_path / "c", **kw)
    assert not (tmp_path / "c").exists()


def test_a_signal_given_as_a_dict_is_read_as_the_signal_object(tmp_path, capsys):
    """A dict of a signal's attributes (edge_index, edge_weight, features, targets, ...) was 'the signal has no
    features' (read by attribute); now it writes what the object writes, and a key no signal has is named."""
    import h5py

    sig = _static_signal()
    from_signal(sig, tmp_path / "obj")
    from_signal(dict(vars(sig)), tmp_path / "dict")
    a, b = _inspect(tmp_path / "obj", capsys), _inspect(tmp_path / "dict", capsys)
    for key in ("num_vertices", "num_snapshots", "num_features", "nnz", "edges", "targets", "valid"):
        assert a[key] == b[key], key
    with h5py.File(tmp_path / "obj" / "shards" / "shard-00000.h5") as f, \
            h5py.File(tmp_path / "dict" / "shards" / "shard-00000.h5") as g:
        for name in ("indptr", "indices", "weights", "x", "targets"):
            np.testing.assert_array_equal(f["t000003"][name][()], g["t000003"][name][()])
    dyn = {"edge_indices": [sig.edge_index] * 6, "features": sig.features, "targets": sig.targets}  # no weights
    assert from_signal(dyn, tmp_path / "dyn").num_snapshots == 6
    with pytest.raises(DataError, match=r"^from_signal: signal\['featuers'\]: unknown key; did you mean 'features'"):
        from_signal({"edge_index": sig.edge_index, "featuers": sig.features}, tmp_path / "typo")
    with pytest.raises(DataError, match=r"^from_signal: signal: give 'edge_index' .* or 'edge_indices'"):
        from_signal({"features": sig.features}, tmp_path / "nograph")
    assert not (tmp_path / "typo").exists() and not (tmp_path / "nograph").exists()


def test_a_rare_class_is_a_python_warning_of_the_adapters_not_a_line_on_stderr(tmp_path, capsys):
    """from_arrays wrote prepare's class-balance warning to stderr, where the adapters give Python warnings, and
    from_signal(labels=True) gave none: both now warn with a UserWarning naming the output, stderr left quiet."""
    rare = r"class 1 is [0-9.]+ % of the labelled vertices of the training snapshots .* the accuracy to beat"
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 4, 200), rng.integers(0, 4, 200)  # 4 of 100 vertices active: 'next active' is rare
    with pytest.warns(UserWarning, match=rf"^{tmp_path / 'arrays'}: {rare}"):
        from_arrays(src, dst, np.sort(rng.integers(0, 1000, 200)), tmp_path / "arrays", num_vertices=100,
                    snapshots=10, labels="next_activity")
    steps = 10
    sig = SimpleNamespace(edge_index=np.array([[0, 1, 2], [1, 2, 3]]), edge_weight=None,
                          features=[rng.standard_normal((9, 2)) for _ in range(steps)],
                          targets=[np.array([0] * 8 + [1]) for _ in range(steps)])
    with pytest.warns(UserWarning, match=rf"^{tmp_path / 'signal'}: {rare}"):
        from_signal(sig, tmp_path / "signal", labels=True)
    assert capsys.readouterr().err == ""
    sig.targets = [np.arange(9) % 2 for _ in range(steps)]  # balanced: nothing said
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_signal(sig, tmp_path / "balanced", labels=True)


@pytest.mark.parametrize("options, words", [
    ({"val_ratio": 0.15}, "from_temporal_data: val_ratio: unknown option; the fractions are one argument, "
                          "split=(train, val, test)"),
    ({"test_ratio": 0.15}, "from_temporal_data: test_ratio: unknown option; the fractions are one argument"),
    ({"shard_event": 5}, "from_temporal_data: shard_event: unknown option; did you mean 'shard_events'?"),
    ({"edge_lif": 2}, "from_temporal_data: edge_lif: unknown option; choose from allow_large, bipartite, force, "
                      "num_vertices, shard_events, split, time_unit"),
])
def test_from_temporal_data_offers_only_its_own_options(tmp_path, options, words):
    """An unknown keyword was answered with ``prepare``'s every option (``edge_life``, ``labels``, ``lags``: the
    snapshot ones an event stream refuses); PyG's ``val_ratio``/``test_ratio`` got that list, not ``split``."""
    with pytest.raises(DataError) as e:
        from_temporal_data({"src": [0, 1], "dst": [1, 2], "t": [0, 1]}, tmp_path / "out", **options)
    assert str(e.value).startswith(words) and "\n" not in str(e.value), e.value
    assert "edge_life" not in str(e.value) and "labels" not in str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("src, words", [
    (torch.tensor([0.0, 1.0, 2.0]), "dtype float32 (every value is a whole number: cast them, e.g. "
                                    ".astype(np.int64) for numpy or pandas, .long() for torch)"),
    (np.array([0.0, 1.5, 2.0]), "dtype float64 (1.5 at 1 is no whole number)"),
    (np.array([0.0, 1.0, np.nan]), "dtype float64 (nan at 2 is no whole number)"),
])
def test_float_ids_are_refused_with_how_to_cast_or_the_first_fraction(tmp_path, src, words):
    """Ids as whole-number floats (pandas' after a NaN) were refused with their dtype alone: the refusal stays (a
    float32 may have rounded them), saying how to cast them, or naming the first that is no whole number."""
    for call in (lambda: from_temporal_data({"src": src, "dst": [1, 2, 0], "t": [0, 1, 2]}, tmp_path / "out"),
                 lambda: from_arrays(src, [1, 2, 0], [0, 1, 2], tmp_path / "out", snapshots=1)):
        with pytest.raises(DataError) as e:
            call()
        assert str(e.value).endswith("src: expected a 1-D array of integer vertex ids, got shape (3,) " + words), e
    assert not (tmp_path / "out").exists()
