"""Tests of hpcdgnn.data.prepare: real SNAP / PyGT files, hand-made inputs, labels, errors, CLI."""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.prepare import add_prepare_arguments, prepare_dataset, run_prepare
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.errors import DataError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"{path} not present (the shared datasets live in shared/data beside the repository)")
    return path


def _edges_of(root: Path) -> list[set[tuple[int, int]]]:
    """Raw edge set of every snapshot, read back from the shards."""
    m = load_manifest(root)
    with ShardReader(root, m) as r:
        out = []
        for t in range(m.num_snapshots):
            src, dst = r.read_target(t)
            out.append(set(zip(src.tolist(), dst.tolist(), strict=True)))
    return out


def _original_ids(root: Path) -> list:
    with h5py.File(root / "vertices.h5") as f:
        ids = f["original_id"][()]
    return [i.decode() if isinstance(i, bytes) else i for i in ids.tolist()]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --------------------------------------------------------------------------- real SNAP files


def test_collegemsg_20_slices_match_independent_count(tmp_path):
    """Per-slice distinct (src, dst) pairs, counted here from the raw gz with the documented slice rule."""
    path = _shared("CollegeMsg.txt.gz")
    rows = [line.split() for line in gzip.open(path, "rt") if line.strip() and not line.startswith("#")]
    times = [int(r[2]) for r in rows]
    tmin, tmax = min(times), max(times)
    T = 20
    pairs = [set() for _ in range(T)]
    for (s, d, _), t in zip(rows, times, strict=True):
        pairs[min(T - 1, (t - tmin) * T // (tmax - tmin))].add((int(s), int(d)))
    want = [len(p) for p in pairs]

    root = tmp_path / "uci"
    m = prepare_dataset(path, "snap", root, snapshots=T)
    assert m.num_snapshots == T and m.num_vertices == 1899
    assert m.snapshot_edges == want
    assert m.snapshot_nnz == want  # no smoothing: A_t's pattern is the raw edge set
    ids = _original_ids(root)
    assert ids == list(range(1, 1900))  # contiguous 1..1899, numeric order
    got = [{(ids[s], ids[d]) for s, d in e} for e in _edges_of(root)]
    assert got == pairs
    span = tmax - tmin
    assert m.snapshot_time[0][0] == tmin and m.snapshot_time[-1][1] == tmax
    assert m.snapshot_time[3] == pytest.approx([tmin + 3 * span / T, tmin + 4 * span / T])


def test_bitcoin_csv_unsorted_noncontiguous_round_trip(tmp_path):
    """Comma-separated, 4 columns, unsorted rows, ids 1..7604 with gaps: N = 3783, ids map back exactly."""
    path = _shared("soc-sign-bitcoinalpha.csv.gz")
    rows = [tuple(map(int, line.split(","))) for line in gzip.open(path, "rt") if line.strip()]
    root = tmp_path / "btc"
    m = prepare_dataset(path, "snap", root, snapshots=10, weights="count")
    assert m.num_vertices == 3783
    ids = _original_ids(root)
    assert ids == sorted({r[0] for r in rows} | {r[1] for r in rows})
    back = set()
    for e in _edges_of(root):
        back |= {(ids[s], ids[d]) for s, d in e}
    assert back == {(r[0], r[1]) for r in rows}
    assert sum(m.snapshot_edges) == 24186  # every directed pair occurs once in the file
    times = sorted(r[3] for r in rows)
    assert m.snapshot_time[0][0] == times[0] and m.snapshot_time[-1][1] == times[-1]
    with pytest.raises(DataError, match=r"soc-sign-bitcoinalpha.csv.gz: --weights given: negative weights"):
        prepare_dataset(path, "snap", tmp_path / "neg", weights="given")


# --------------------------------------------------------------------------- hand-made SNAP inputs

TINY = """# src dst time
10 20 0
20 30 1
10 20 2

30 10 5
20 10 6
10 20 9
"""


def test_slicing_modes_on_tiny_input(tmp_path):
    """--snapshots, --window and --events-per-snapshot cut a hand-made stream as documented."""
    p = _write(tmp_path, "tiny.txt", TINY)
    # ids 10, 20, 30 -> 0, 1, 2
    m = prepare_dataset(p, "snap", tmp_path / "a", snapshots=3)  # span 9: slices [0,3) [3,6) [6,9]
    assert _edges_of(tmp_path / "a") == [{(0, 1), (1, 2)}, {(2, 0)}, {(1, 0), (0, 1)}]
    assert m.snapshot_time == [[0, 3], [3, 6], [6, 9]]
    m = prepare_dataset(p, "snap", tmp_path / "b", window=2)  # [0,2) [2,4) [4,6) [6,8) [8,10)
    assert _edges_of(tmp_path / "b") == [{(0, 1), (1, 2)}, {(0, 1)}, {(2, 0)}, {(1, 0)}, {(0, 1)}]
    assert m.snapshot_time[-1] == [8, 10]
    m = prepare_dataset(p, "snap", tmp_path / "c", events_per_snapshot=4)
    assert _edges_of(tmp_path / "c") == [{(0, 1), (1, 2), (2, 0)}, {(1, 0), (0, 1)}]
    assert m.snapshot_edges == [3, 2] and m.snapshot_time == [[0, 5], [6, 9]]


def test_unsorted_rows_are_sorted_by_time_first(tmp_path):
    """Row order does not matter: events are stably sorted by time before slicing."""
    shuffled = "\n".join(reversed([line for line in TINY.splitlines() if line and line[0] != "#"]))
    a = prepare_dataset(_write(tmp_path, "s.txt", shuffled), "snap", tmp_path / "a", events_per_snapshot=2)
    b = prepare_dataset(_write(tmp_path, "t.txt", TINY), "snap", tmp_path / "b", events_per_snapshot=2)
    assert _edges_of(tmp_path / "a") == _edges_of(tmp_path / "b")
    assert a.snapshot_time == b.snapshot_time


def test_default_is_32_snapshots_and_string_ids(tmp_path):
    """No slicing option means 32 snapshots; non-integer ids sort lexicographically."""
    p = _write(tmp_path, "s.csv", "b,a,1\nc,a,2\na,b,40\n")
    root = tmp_path / "d"
    m = prepare_dataset(p, "snap", root)
    assert m.num_snapshots == 32
    assert _original_ids(root) == ["a", "b", "c"]  # non-integer ids: lexicographic
    assert m.snapshot_edges[0] == 2 and m.snapshot_edges[-1] == 1 and sum(m.snapshot_edges) == 3


def test_float_times_slice_formula(tmp_path):
    """Fractional times use floor((t - tmin) * T / (tmax - tmin)), the last slice closed."""
    times = [0.0, 0.1, 0.25, 0.3, 0.7, 0.95, 1.0]
    p = _write(tmp_path, "f.txt", "".join(f"0 {i + 1} {t}\n" for i, t in enumerate(times)))
    m = prepare_dataset(p, "snap", tmp_path / "d", snapshots=4)
    want = [0] * 4
    for t in times:
        want[min(3, int(np.floor((t - 0.0) * 4 / 1.0)))] += 1
    assert m.snapshot_edges == want == [2, 2, 1, 2]


def test_edge_life_and_mtransform_end_to_end(tmp_path):
    """The prepare smoothing equals the dense IBM §5.4 sums on a tiny input."""
    p = _write(tmp_path, "tiny.txt", TINY)
    raw = [{(0, 1), (1, 2)}, {(2, 0)}, {(1, 0), (0, 1)}]
    dense = np.zeros((3, 3, 3))
    for t, e in enumerate(raw):
        for s, d in e:
            dense[t, s, d] = 1.0
    for kw, want in (
        ({"edge_life": 2}, np.stack([dense[0], dense[0] + dense[1], dense[1] + dense[2]])),
        ({"mtransform": 2}, np.stack([dense[0], (dense[0] + dense[1]) / 2, (dense[1] + dense[2]) / 2])),
    ):
        root = tmp_path / next(iter(kw))
        m = prepare_dataset(p, "snap", root, snapshots=3, **kw)
        with ShardReader(root, m) as r:
            for t in range(3):
                s = r.read(t)
                got = np.zeros((3, 3))
                got[s.rows(), s.indices] = s.weights
                np.testing.assert_allclose(got, want[t], rtol=1e-6)
        assert _edges_of(root) == raw  # link-prediction targets stay the raw edges


def test_undirected_symmetry(tmp_path):
    """--undirected makes every A_t symmetric, weights included."""
    path = _shared("CollegeMsg.txt.gz")
    root = tmp_path / "u"
    m = prepare_dataset(path, "snap", root, snapshots=5, undirected=True, weights="count")
    assert not m.directed
    with ShardReader(root, m) as r:
        for t in range(m.num_snapshots):
            s = r.read(t)
            a = {(i, j): w for i, j, w in zip(s.rows().tolist(), s.indices.tolist(), s.weights.tolist(), strict=True)}
            assert all(a.get((j, i)) == w for (i, j), w in a.items())


def test_next_activity_labels(tmp_path):
    """Label 1 iff the vertex has an edge in the next snapshot; last snapshot -1."""
    p = _write(tmp_path, "tiny.txt", TINY)
    root = tmp_path / "d"
    m = prepare_dataset(p, "snap", root, snapshots=3, labels="next_activity")
    assert m.num_classes == 2
    with ShardReader(root, m) as r:
        labels = [r.read(t).labels.tolist() for t in range(3)]
    # slice 1 has 30->10 (vertices 2, 0); slice 2 has 20->10, 10->20 (vertices 1, 0)
    assert labels == [[1, 0, 1], [1, 1, 0], [-1, -1, -1]]


def test_log_features_and_shard_size(tmp_path):
    """--log-features gives log1p degrees; --shard-size sets snapshots per shard."""
    p = _write(tmp_path, "tiny.txt", TINY)
    m = prepare_dataset(p, "snap", tmp_path / "d", snapshots=3, log_features=True, shard_size=2)
    assert [(s.t_start, s.t_stop) for s in m.shards] == [(0, 2), (2, 3)]
    with ShardReader(tmp_path / "d", m) as r:
        np.testing.assert_allclose(r.read(0).x, np.log1p([[0, 1], [1, 1], [1, 0]]))


@pytest.mark.parametrize("kind", ["plain", "gzip", "xz"])
def test_compression_detected_by_magic_bytes(tmp_path, kind):
    """Plain, gzip and xz inputs with the same misleading suffix give the same dataset."""
    data = TINY.encode()
    blob = {"plain": data, "gzip": gzip.compress(data), "xz": lzma.compress(data)}[kind]
    p = tmp_path / "edges.txt"  # same misleading suffix for all three
    p.write_bytes(blob)
    prepare_dataset(p, "snap", tmp_path / "d", snapshots=3)
    assert _edges_of(tmp_path / "d") == [{(0, 1), (1, 2)}, {(2, 0)}, {(1, 0), (0, 1)}]


@pytest.mark.parametrize(
    "text,match",
    [
        ("1 2 3\n1 2 x\n", r"bad\.txt:2: cannot parse time 'x'"),
        ("# c\n1 2 3\n\n1 2 3 4 5\n", r"bad\.txt:4: expected 3 columns like line 2, got 5"),
        ("1 2\n", r"bad\.txt:1: expected 3 or 4 columns"),
        ("1 2 nan\n", r"bad\.txt:1: time 'nan' is not a finite number"),
        ("1 2 w 3\n", r"bad\.txt:1: cannot parse weight 'w'"),
        ("", r"bad\.txt: no events"),
        ("# only a comment\n\n", r"bad\.txt: no events"),
        ("1 2 5\n3 4 5\n", r"bad\.txt: all events share one timestamp"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, text, match):
    """Malformed inputs raise a DataError naming file and line; nothing is written."""
    p = _write(tmp_path, "bad.txt", text)
    with pytest.raises(DataError, match=match):
        prepare_dataset(p, "snap", tmp_path / "out", snapshots=4)
    assert not (tmp_path / "out").exists()


def test_option_errors(tmp_path):
    """Options that do not fit the input are one-line DataErrors naming the input file."""
    p = _write(tmp_path, "tiny.txt", TINY)
    out = tmp_path / "out"
    with pytest.raises(DataError, match=r"tiny\.txt: --weights given needs a weight column"):
        prepare_dataset(p, "snap", out, weights="given")
    with pytest.raises(DataError, match=r"--labels state applies only to --format jodie"):
        prepare_dataset(p, "snap", out, labels="state")
    with pytest.raises(DataError, match=r"only one of"):
        prepare_dataset(p, "snap", out, snapshots=3, window=2.0)
    with pytest.raises(DataError, match=r"--window must be a positive"):
        prepare_dataset(p, "snap", out, window=0)
    with pytest.raises(DataError, match=r"makes 9000001 snapshots"):
        prepare_dataset(p, "snap", out, window=1e-6)
    with pytest.raises(DataError, match=r"makes 9e\+15 snapshots \(limit"):  # overflowed int64: a numpy traceback
        prepare_dataset(p, "snap", out, window=1e-15)
    huge = _write(tmp_path, "huge.txt", "1 2 -1e308\n2 3 1e308\n")
    for how in ({"window": 1.0}, {"snapshots": 4}):
        with pytest.raises(DataError, match=r"huge\.txt: the time span -1e\+308 \.\. 1e\+308 overflows a float"):
            prepare_dataset(huge, "snap", out, **how)
    with pytest.raises(DataError, match=r"missing\.txt: input file does not exist"):
        prepare_dataset(tmp_path / "missing.txt", "snap", out)
    with pytest.raises(DataError, match=r"corrupt compressed input"):
        (tmp_path / "trunc.gz").write_bytes(gzip.compress(TINY.encode())[:20])
        prepare_dataset(tmp_path / "trunc.gz", "snap", out)
    with pytest.raises(DataError, match=r"tiny\.txt: snapshot: unknown option; did you mean 'snapshots'\?"):
        prepare_dataset(p, "snap", out, snapshot=3)
    assert not out.exists()


# --------------------------------------------------------------------------- JODIE

JODIE = """user_id,item_id,timestamp,state_label,comma_separated_list_of_features
7,100,0.0,0,0.1,0.2
3,100,1.0,0,0.3,0.4
7,101,2.0,1,0.5,0.6
3,101,3.0,0,0.7,0.8
7,100,4.0,0,0.9,1.0
12,5,4.0,0,0.0,0.0
"""


def test_jodie_bipartite_state_labels(tmp_path):
    """Users then items as vertices, user->item edges, state labels per window."""
    p = _write(tmp_path, "wiki.csv", JODIE)
    root = tmp_path / "j"
    m = prepare_dataset(p, "jodie", root, snapshots=2, labels="state")
    # users 3, 7, 12 -> 0, 1, 2; items 5, 100, 101 -> 3, 4, 5
    assert _original_ids(root) == ["u:3", "u:7", "u:12", "i:5", "i:100", "i:101"]
    assert m.num_vertices == 6 and m.num_classes == 2 and m.directed
    # slices over [0, 4]: [0, 2) and [2, 4]
    assert _edges_of(root) == [{(1, 4), (0, 4)}, {(1, 5), (0, 5), (1, 4), (2, 3)}]
    with ShardReader(root, m) as r:
        assert r.read(0).labels.tolist() == [0, 0, -1, -1, -1, -1]
        assert r.read(1).labels.tolist() == [0, 1, 0, -1, -1, -1]  # user 7 changed state in window 1
    assert m.source["edge_features"] == "ignored"


def test_jodie_next_activity_and_errors(tmp_path):
    """next_activity works for JODIE; bad state labels, headers and rows are located."""
    p = _write(tmp_path, "wiki.csv", JODIE)
    m = prepare_dataset(p, "jodie", tmp_path / "a", events_per_snapshot=3, labels="next_activity")
    with ShardReader(tmp_path / "a", m) as r:
        assert r.read(0).labels.tolist() == [1, 1, 1, 1, 1, 1]
        assert r.read(1).labels.tolist() == [-1] * 6
    with pytest.raises(DataError, match=r"wiki\.csv: --weights given"):
        prepare_dataset(p, "jodie", tmp_path / "b", weights="given")
    bad = _write(tmp_path, "bad.csv", JODIE.replace("3,101,3.0,0", "3,101,3.0,2"))
    with pytest.raises(DataError, match=r"bad\.csv:5: state_label must be 0 or 1"):
        prepare_dataset(bad, "jodie", tmp_path / "b", labels="state")
    prepare_dataset(bad, "jodie", tmp_path / "unlabelled")  # the label column is read only for --labels state
    nohead = _write(tmp_path, "nohead.csv", "\n".join(JODIE.splitlines()[1:]))
    with pytest.raises(DataError, match=r"nohead\.csv:1: no header line .* --columns src=0,dst=1,time=2"):
        prepare_dataset(nohead, "jodie", tmp_path / "b")
    short = _write(tmp_path, "short.csv", JODIE + "1,2,3\n")
    with pytest.raises(DataError, match=r"short\.csv:8: expected at least 4 fields"):
        prepare_dataset(short, "jodie", tmp_path / "b", labels="state")
    # one row shorter than the others is cut (a truncated last line: "1,2,3" may be "1,2,3600,0,..." cut short),
    # refused as --kind events does; rows that all lack a label it does not read are read
    with pytest.raises(DataError, match=r"short\.csv:8: expected 6 fields like line 2, got 3"):
        prepare_dataset(short, "jodie", tmp_path / "no-label")
    unlabelled = "".join(",".join(row.split(",")[:3]) + "\n" for row in JODIE.splitlines()[1:])
    m = prepare_dataset(_write(tmp_path, "unlabelled.csv", JODIE.splitlines()[0] + "\n" + unlabelled), "jodie",
                        tmp_path / "no-label")
    assert m.source["events"] == 6
    with pytest.raises(DataError, match=r"shorter\.csv:8: expected at least 3 fields \(user,item,timestamp\)"):
        prepare_dataset(_write(tmp_path, "shorter.csv", JODIE + "1,2\n"), "jodie", tmp_path / "b")


# --------------------------------------------------------------------------- PyGT json


def test_pygt_chickenpox_lagged_features_and_bins(tmp_path):
    """Chickenpox: PyGT's lagged features[k] and median-bin targets, 517 snapshots."""
    path = _shared("chickenpox.json.gz")
    fx = np.array(json.load(gzip.open(path))["FX"])
    root = tmp_path / "cp"
    m = prepare_dataset(path, "pygt-json", root, labels="target_bins")
    assert (m.num_vertices, m.num_snapshots, m.num_features) == (20, 521 - 4, 4)
    assert m.feature_names == ["lag_4", "lag_3", "lag_2", "lag_1"]
    assert m.snapshot_edges == [102] * 517
    with ShardReader(root, m) as r:
        for k in (0, 200, 516):
            s = r.read(k)
            np.testing.assert_allclose(s.x, fx[k : k + 4].T, rtol=1e-6)  # PyGT features[k]
            target = fx[k + 4]
            assert s.labels.tolist() == (target > np.median(target)).astype(int).tolist()
    assert _original_ids(root)[:2] == ["BACS", "BARANYA"]


def test_pygt_england_dynamic_zscored_weighted(tmp_path):
    """England COVID: per-node z-score, day-k graph with summed given weights, lags 8."""
    path = _shared("england_covid.json.gz")
    d = json.load(gzip.open(path))
    root = tmp_path / "en"
    m = prepare_dataset(path, "pygt-json", root, lags=8, weights="given")
    assert (m.num_vertices, m.num_snapshots, m.num_features) == (129, 53, 8)
    y = np.array(d["y"], dtype=np.float64)
    z = (y - y.mean(axis=0)) / (y.std(axis=0) + 1e-10)
    with ShardReader(root, m) as r:
        s = r.read(5)
        np.testing.assert_allclose(s.x, z[5:13].T, rtol=1e-5, atol=1e-6)
        want = {}
        for (a, b), w in zip(d["edge_mapping"]["edge_index"]["5"], d["edge_mapping"]["edge_weight"]["5"], strict=True):
            want[(a, b)] = want.get((a, b), 0.0) + w
        got = dict(zip(zip(s.rows().tolist(), s.indices.tolist(), strict=True), s.weights.tolist(), strict=True))
        assert got.keys() == want.keys()
        assert all(got[k] == pytest.approx(v, rel=1e-6) for k, v in want.items())


def test_pygt_twitter_tennis_features_and_next_bins(tmp_path):
    """Twitter tennis: raw 2-dim X as features, bins of the next snapshot's y."""
    path = _shared("twitter_tennis_rg17.json.gz")
    d = json.load(gzip.open(path))
    root = tmp_path / "tw"
    m = prepare_dataset(path, "pygt-json", root, labels="target_bins", weights="given")
    assert (m.num_vertices, m.num_snapshots, m.feature_names) == (1000, 120, ["degree", "transitivity"])
    assert sum(m.snapshot_edges) == 40839
    with ShardReader(root, m) as r:
        s = r.read(3)
        np.testing.assert_allclose(s.x, np.array(d["3"]["X"], dtype=np.float32))
        y4 = np.array(d["4"]["y"])
        assert s.labels.tolist() == (y4 > np.median(y4)).astype(int).tolist()
        assert r.read(119).labels.tolist() == [-1] * 1000
    assert _original_ids(root)[0] == "rolandgarros"
    with pytest.raises(DataError, match=r"--lags applies to lagged-signal datasets"):
        prepare_dataset(path, "pygt-json", tmp_path / "x", lags=3)


def test_pygt_static_signals(tmp_path):
    """PedalMe and Montevideo (node-link with bus_stop ids) prepare with given weights."""
    m = prepare_dataset(_shared("pedalme_london.json.gz"), "pygt-json", tmp_path / "p", weights="given")
    assert (m.num_vertices, m.num_snapshots, m.snapshot_edges[0]) == (15, 31, 225)
    path = _shared("montevideo_bus.json.gz")
    root = tmp_path / "mv"
    m = prepare_dataset(path, "pygt-json", root, weights="given", shard_size=64)
    assert (m.num_vertices, m.num_snapshots, m.num_features) == (675, 740, 4)
    d = json.load(gzip.open(path))
    stops = [n["bus_stop"] for n in d["nodes"]]
    assert _original_ids(root) == stops
    with ShardReader(root, m) as r:
        s = r.read(0)
        got = {(stops[a], stops[b]) for a, b in zip(s.rows().tolist(), s.indices.tolist(), strict=True)}
        assert got == {(lk["source"], lk["target"]) for lk in d["links"]}
        assert np.abs(s.x.mean()) < 1.0  # z-scored per node
    with pytest.raises(DataError, match=r"chickenpox\.json\.gz: --weights given: this dataset has no edge weights"):
        prepare_dataset(_shared("chickenpox.json.gz"), "pygt-json", tmp_path / "c", weights="given")


def test_pygt_errors(tmp_path):
    """pygt-json rejects window options, bad JSON, unknown layouts and out-of-range ids."""
    path = _shared("pedalme_london.json.gz")
    with pytest.raises(DataError, match=r"do not apply to pygt-json"):
        prepare_dataset(path, "pygt-json", tmp_path / "o", snapshots=4)
    # was ignored (the file's features are stored as they are) while the manifest recorded log_features: true
    with pytest.raises(DataError, match=r"--log-features applies only to the degree features of --format snap or "
                                        r"jodie \(pygt-json stores the file's own features as they are\)$"):
        prepare_dataset(path, "pygt-json", tmp_path / "o", log_features=True)
    with pytest.raises(DataError, match=r"bad\.json:2: invalid JSON"):
        prepare_dataset(_write(tmp_path, "bad.json", '{"a":\n ]'), "pygt-json", tmp_path / "o")
    with pytest.raises(DataError, match=r"odd\.json: not a known PyGT dataset layout \(top-level keys: a, b\)"):
        prepare_dataset(_write(tmp_path, "odd.json", '{"a": 1, "b": 2}'), "pygt-json", tmp_path / "o")
    with pytest.raises(DataError, match=r"out\.json: key 'edges': vertex id outside \[0, 2\)"):
        doc = {"edges": [[0, 1], [1, 5]], "FX": [[0.0, 1.0]] * 6}
        prepare_dataset(_write(tmp_path, "out.json", json.dumps(doc)), "pygt-json", tmp_path / "o")
    with pytest.raises(DataError, match=r"target_bins applies only to --format pygt-json"):
        prepare_dataset(_write(tmp_path, "t.txt", TINY), "snap", tmp_path / "o", labels="target_bins")
    # each was a traceback (IndexError, OverflowError) or silently truncated to vertex 0
    for name, doc, says in [
        ("nofx.json", {"edges": [[0, 1]], "FX": []}, r"key 'FX': expected 2 dimensions, got shape \(0,\)"),
        ("huge.json", {"edges": [[1e300, 1]], "FX": [[0.0, 1.0]] * 6}, r"key 'edges': 1e\+300 is not a vertex id"),
        ("half.json", {"edges": [[0.5, 1]], "FX": [[0.0, 1.0]] * 6}, r"key 'edges': 0\.5 is not a vertex id"),
        # numpy took true for 1.0 and false for vertex 0
        ("bool.json", {"edges": [[0, 1]], "FX": [[0.0, True]] * 6}, r"key 'FX': true/false where numbers"),
        ("boolid.json", {"edges": [[False, 1]], "FX": [[0.0, 1.0]] * 6}, r"key 'edges': true/false where numbers"),
        # found by the writer, which named the output directory
        ("tw.json", {"time_periods": 1, "node_ids": {"a": 0, "b": 1},
                     "0": {"edges": [[0, 1]], "weights": [1.0, 2.0], "X": [[0, 0], [0, 0]], "y": [0, 0]}},
         r"key '0\.weights': 2 weights for 1 edges"),
        # England COVID's day count against its own time_periods (PyG Temporal's loader reads the latter)
        ("en.json", {"time_periods": 3, "y": [[1.0, 2.0]] * 2, "edge_mapping": {"edge_index": {}, "edge_weight": {}}},
         r"key 'time_periods' is 3, but 'y' holds 2 days"),
    ]:
        with pytest.raises(DataError, match=rf"{name}: " + says):
            prepare_dataset(_write(tmp_path, name, json.dumps(doc)), "pygt-json", tmp_path / "o")


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hpcdgnn prepare")
    add_prepare_arguments(p)
    return p


def test_cli_prepare_prints_summary(tmp_path, capsys):
    """The prepare CLI prints 'prepared DIR: N T F edges nnz shards' and documents the default."""
    p = _write(tmp_path, "tiny.txt", TINY)
    out = tmp_path / "d"
    args = _parser().parse_args([str(p), "--format", "snap", "--output", str(out), "--snapshots", "3", "--undirected"])
    assert run_prepare(args) == 0
    line = capsys.readouterr().out.strip()
    # edges are distinct pairs per snapshot (both directions, --undirected) of the file's 6 timestamped rows
    assert line == (f"prepared {out}: N=3 T=3 F=2 edges=8 nnz=8 shards=1 "
                    "(distinct (u, v) per snapshot, both ways for --undirected; from 6 input events)")
    from hpcdgnn.__main__ import main

    assert main(["inspect", str(out)]) == 0  # inspect says the same
    assert "total 8  (distinct (u, v) per snapshot; from 6 input events)" in capsys.readouterr().out
    assert "32" in _parser().format_help()  # the default snapshot count is stated in --help


def test_cli_slicing_options_are_exclusive(tmp_path, capsys):
    """Two slicing options are an argparse usage error (exit 2)."""
    with pytest.raises(SystemExit) as e:
        _parser().parse_args(["x", "--format", "snap", "--output", "o", "--snapshots", "3", "--window", "5"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_pygt_edge_shapes(tmp_path):
    """Edge lists must be [src, dst] pairs; an empty snapshot is allowed."""
    doc = {"edges": [[0, 1, 2], [1, 0, 2]], "FX": [[0.0, 1.0]] * 6}
    with pytest.raises(DataError, match=r"tri\.json: key 'edges': expected \[src, dst\] pairs"):
        prepare_dataset(_write(tmp_path, "tri.json", json.dumps(doc)), "pygt-json", tmp_path / "o")
    doc = {"edges": [], "FX": [[0.0, 1.0]] * 6}
    m = prepare_dataset(_write(tmp_path, "none.json", json.dumps(doc)), "pygt-json", tmp_path / "o", lags=2)
    assert (m.num_vertices, m.num_snapshots, m.snapshot_edges) == (2, 4, [0, 0, 0, 0])


def test_email_eu_core_inversions_sorted_before_event_groups(tmp_path):
    """email-Eu-core has out-of-order rows: groups of K events follow the stable time sort, ids 0..1004 with gaps."""
    path = _shared("email-Eu-core-temporal.txt.gz")
    raw = np.loadtxt(gzip.open(path, "rt"), dtype=np.int64)
    raw = raw[np.argsort(raw[:, 2], kind="stable")]
    K = 50_000
    want = [len({(int(s), int(d)) for s, d, _ in raw[lo : lo + K]}) for lo in range(0, raw.shape[0], K)]
    root = tmp_path / "eu"
    m = prepare_dataset(path, "snap", root, events_per_snapshot=K, shard_size=4)
    assert m.num_vertices == 986 and m.snapshot_edges == want
    assert _original_ids(root) == np.unique(raw[:, :2]).tolist()
    assert [t[0] for t in m.snapshot_time] == raw[::K, 2].astype(float).tolist()


@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, kind):
    """h5py meeting a full disk printed hundreds of ignored-exception tracebacks, left its temporary directory and
    segfaulted at exit. Now prepare checks the room before writing, and a write that fails anyway (someone
    else filled the disk meanwhile) is one line with the temporary directory removed — for both kinds (the
    event writer had neither)."""
    import errno
    import shutil
    from collections import namedtuple

    import hpcdgnn.data.writer as writer

    p = _write(tmp_path, "tiny.txt", TINY)
    out = tmp_path / "out"
    usage = namedtuple("usage", "total used free")
    with monkeypatch.context() as m:
        m.setattr(shutil, "disk_usage", lambda _: usage(10**6, 10**6 - 10, 10))
        with pytest.raises(DataError, match=r"out: the dataset needs about .* and its file system has 10 B free"):
            prepare_dataset(p, "snap", out, kind=kind)
    assert shutil.disk_usage(tmp_path).free > 10

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "Unable to synchronously create file (file write failed ...)")

    monkeypatch.setattr(writer.h5py, "File", full)
    with pytest.raises(DataError, match=r"out: cannot write the dataset: No space left on device \(nothing was kept"):
        prepare_dataset(p, "snap", out, kind=kind)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["tiny.txt"]


@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_dataset_another_prepare_finished_meanwhile_is_kept(tmp_path, monkeypatch, kind):
    """Two prepares into one --output both found it absent; the one finishing second deleted the other's finished
    dataset to put its own there. Now it discards its own, in one line."""
    import hpcdgnn.data.events as events
    import hpcdgnn.data.writer as writer

    p = _write(tmp_path, "tiny.txt", TINY)
    out = tmp_path / "out"
    module = writer if kind == "snapshots" else events
    save = module.save_manifest if kind == "snapshots" else module.save_event_manifest

    def and_the_other_finishes(tmp, manifest):
        save(tmp, manifest)
        out.mkdir()
        (out / "manifest.json").write_text("the other prepare's")

    monkeypatch.setattr(module, "save_manifest" if kind == "snapshots" else "save_event_manifest",
                        and_the_other_finishes)
    with pytest.raises(DataError, match=r"out: another dataset was written there while this one was"):
        prepare_dataset(p, "snap", out, kind=kind)
    assert (out / "manifest.json").read_text() == "the other prepare's"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out", "tiny.txt"]


def test_another_prepare_s_temporary_directory_is_left_alone(tmp_path):
    """Two prepares into one --output on two nodes of a shared file system may have the same pid: the temporary
    directory was named by the pid, and the second prepare deleted the first's while it wrote."""
    import os

    p = _write(tmp_path, "tiny.txt", TINY)
    theirs = tmp_path / f".out.tmp-{os.getpid()}"
    (theirs / "shards").mkdir(parents=True)
    (theirs / "shards" / "s0.h5").write_text("being written on another node")
    prepare_dataset(p, "snap", tmp_path / "out")
    assert (theirs / "shards" / "s0.h5").read_text() == "being written on another node"
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([theirs.name, "out", "tiny.txt"])


def test_cli_prepare_warns_of_empty_snapshots(tmp_path, capsys):
    """Equal time windows over a bursty timeline leave snapshots without edges; a split among them has no examples
    (the README's email-Eu-core example in 32 windows: val_auc '-' in every epoch, and nothing said why)."""
    p = _write(tmp_path, "gap.txt", "0 1 0\n1 2 1\n2 0 100\n")
    out = tmp_path / "d"
    args = _parser().parse_args([str(p), "--format", "snap", "--output", str(out), "--snapshots", "4"])
    assert run_prepare(args) == 0
    err = capsys.readouterr().err
    assert f"hpcdgnn prepare: warning: {out}: 2 of 4 snapshots have no edges (t = 1-2)" in err, err


@pytest.mark.mpi
def test_prepare_and_generate_under_mpirun_write_once(tmp_path, launcher):
    """``mpirun -np 3 python -m hpcdgnn prepare`` (a job script's ``srun``): the three ranks each wrote --output,
    two of them exiting 2 with "output exists" (the dataset made, the job failed); rank 0 now writes, the
    others wait for it, and the job says "prepared" once, exit 0. A second run is refused on every rank, exit 2."""
    src = _write(tmp_path, "tiny.txt", TINY)
    prepare = ["-m", "hpcdgnn", "prepare", str(src), "--format", "snap", "--snapshots", "3", "--output",
               str(tmp_path / "d")]
    proc = launcher.run(3, prepare, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count(f"prepared {tmp_path / 'd'}: N=3 T=3") == 1 and "exists" not in proc.stderr
    assert load_manifest(tmp_path / "d").num_snapshots == 3
    again = launcher.run(3, prepare, timeout=120, cwd=tmp_path)
    assert again.returncode == 2 and "output exists and is not empty" in again.stderr
    generate = ["-m", "hpcdgnn", "generate", "--output", str(tmp_path / "g"), "--vertices", "50", "--snapshots",
                "2", "--density", "2", "--seed", "1"]
    proc = launcher.run(2, generate, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count(f"generated {tmp_path / 'g'}: N=50 T=2") == 1, proc.stderr


@pytest.mark.mpi
def test_a_refusal_of_rank_0_under_mpirun_is_said_once(tmp_path, launcher):
    """``mpirun -np 3 python -m hpcdgnn generate --output EXISTING`` (and ``export`` of no run at -np 2): rank 0's
    refusal reached the other ranks, which each printed it again, three copies of one line; now rank 0 says it,
    every rank exits 2."""
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "x").write_text("x")
    generate = ["-m", "hpcdgnn", "generate", "--output", str(tmp_path / "g"), "--vertices", "20", "--snapshots",
                "2", "--density", "1", "--seed", "1"]
    proc = launcher.run(3, generate, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("output exists and is not empty") == 1, proc.stderr[-2000:]
    proc = launcher.run(2, ["-m", "hpcdgnn", "export", str(tmp_path / "none")], timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("not a finished hpcdgnn run directory") == 1, proc.stderr


_NODE_LOCAL = """
import os, sys
shared, local, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK")) == "1":  # another node: its own directory
    os.execvp("unshare", ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"', local, shared,
                          sys.executable, *argv])
os.execv(sys.executable, [sys.executable, *argv])
"""


@pytest.mark.mpi
def test_a_node_local_output_with_an_older_dataset_on_another_node_is_refused(tmp_path, launcher):
    """``srun generate --output /local/d --force`` over two nodes whose node-local /local/d each held an older
    dataset: rank 0 rewrote its node's, rank 1 read back its own node's old one and said nothing, exit 0 (the job
    then trained on two datasets). Now rank 1 compares what it reads with what rank 0 wrote: one line, exit 2.
    The other node is rank 1 in a mount namespace of its own, its directory mounted over the shared one."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespaces here (unshare -m)")
    shared, local = tmp_path / "shared", tmp_path / "node1"
    shared.mkdir()
    old = ["-m", "hpcdgnn", "generate", "--vertices", "20", "--snapshots", "2", "--density", "1", "--seed", "2"]
    for where in (shared, local):
        assert launcher.run(None, [*old, "--output", str(where / "d")], cwd=tmp_path).returncode == 0
    new = [*old[:-1], "3", "--output", str(shared / "d"), "--force"]
    proc = launcher.run(2, ["-c", _NODE_LOCAL, str(shared), str(local), *new], timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert (f"generate_dataset: rank 0 wrote {shared / 'd'}, but rank 1 reads another dataset there"
            in proc.stderr), proc.stderr[-2000:]


def _tiny_twitter(tmp_path: Path, y: list[float], periods: int = 10) -> Path:
    """A twitter_tennis-shaped json: ``periods`` snapshots of 5 vertices, every snapshot's y the same."""
    snap = {"edges": [[0, 1], [1, 2]], "weights": [1.0, 1.0], "X": [[1.0, 0.0]] * 5, "y": y}
    doc = {"time_periods": periods, "node_ids": {c: i for i, c in enumerate("abcde")},
           **{str(t): snap for t in range(periods)}}
    return _write(tmp_path, "tw.json", json.dumps(doc))


@pytest.mark.parametrize("y, rare", [([0, 0, 0, 0, 5], True), ([0, 1, 2, 3, 4], False)])
def test_cli_prepare_warns_of_a_rare_class(tmp_path, capsys, y, rare):
    """--labels target_bins where most next targets are 0 (the median): 'above the median' is a rare class, and
    node classification's accuracy that of always answering the other (twitter_tennis_uo17: val_acc 0.835, the
    validation snapshots' share of class 0) was reported with nothing said; one warning line now names the share."""
    out = tmp_path / "d"
    args = _parser().parse_args([str(_tiny_twitter(tmp_path, y)), "--format", "pygt-json", "--labels", "target_bins",
                                 "--output", str(out)])
    assert run_prepare(args) == 0
    err = capsys.readouterr().err
    if not rare:
        assert err == "", err
        return
    assert err.count("\n") == 1, err
    assert err.startswith(f"hpcdgnn prepare: warning: {out}: class 1 is 20.0 % of the labelled vertices of the "
                          "training snapshots (0-6 under task.split's default 0.7/0.15/0.15): always answering "
                          "class 0 scores accuracy 0.800 there and 0.800 on the validation snapshots"), err


def test_twitter_tennis_target_bins_class_balance(tmp_path, capsys):
    """The user's case: twitter_tennis_uo17's snapshot median is 0 in 111 of 112 snapshots; class 0, always
    answered, scores the 0.835 val_acc a node-classification run reported."""
    out = tmp_path / "tw"
    args = _parser().parse_args([str(_shared("twitter_tennis_uo17.json.gz")), "--format", "pygt-json", "--labels",
                                 "target_bins", "--output", str(out)])
    assert run_prepare(args) == 0
    err = capsys.readouterr().err
    assert "class 1 is 19.8 % of the labelled vertices of the training snapshots (0-77" in err, err
    assert "accuracy 0.802 there and 0.835 on the validation snapshots" in err, err
