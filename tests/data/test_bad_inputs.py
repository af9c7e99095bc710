"""Bad input to ``prepare`` and the Python API: one ``DataError`` line naming the file or array (exit 2 on the
command line), never a traceback, a RuntimeWarning or silently wrong data (an audit's reproducers, made tiny)."""

from __future__ import annotations

import io
import json
import pickle
import tarfile
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from hpcdgnn.__main__ import main
from hpcdgnn.data.adapters import from_arrays, from_signal, from_temporal_data
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.errors import DataError

S, D, T = np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 4, 0]), np.array([0, 1, 2, 3, 4])


def _refused(args: list[str], capsys, *needles: str) -> str:
    """``prepare ARGS`` exits 2 with one error line holding every needle."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning reaching the user fails too
        assert main(["prepare", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(n in err for n in needles), err
    return err


def _prepared(args: list[str], capsys) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["prepare", *args]) == 0, capsys.readouterr().err
    capsys.readouterr()


# --------------------------------------------------------------------------- 1. times past int64's range


def test_integer_times_spanning_more_than_2_63_are_sliced_exactly(tmp_path, capsys):
    raw = tmp_path / "so.txt"
    raw.write_text("1 2 -9000000000000000000\n2 3 9000000000000000000\n3 1 0\n")
    _prepared([str(raw), "--format", "snap", "--snapshots", "2", "--output", str(tmp_path / "o1")], capsys)
    m = json.loads((tmp_path / "o1" / "manifest.json").read_text())
    assert m["snapshot_time"] == [[-9e18, 0.0], [0.0, 9e18]] and m["snapshot_edges"] == [1, 2]
    for window, count in (("1e18", 19), ("1e19", 2), ("1e20", 1)):
        _prepared([str(raw), "--format", "snap", "--window", window, "--output", str(tmp_path / window)], capsys)
        m = json.loads((tmp_path / window / "manifest.json").read_text())
        assert len(m["snapshot_edges"]) == count and sum(m["snapshot_edges"]) == 3, window


def test_event_times_at_int64_max_warn_in_one_line_without_a_numpy_warning(tmp_path, capsys):
    raw = tmp_path / "ev.txt"
    raw.write_text("1 2 0\n2 3 1\n3 1 9223372036854775807\n")
    _prepared([str(raw), "--format", "snap", "--kind", "events", "--output", str(tmp_path / "ev")], capsys)


def test_uint64_times_past_int64_are_refused(tmp_path):
    with pytest.raises(DataError, match=r"from_arrays: t: 9223372036854775813 \(at 4\) is beyond int64"):
        from_arrays(S, D, np.array([0, 1, 2, 3, 2**63 + 5], np.uint64), tmp_path / "o", snapshots=2)


# --------------------------------------------------------------------------- 2. pygt-json


def _twitter(**kw):
    snap = {"edges": [[0, 1]], "weights": [1.0], "X": [[1, 2], [3, 4]], "y": [1, 2]}
    return {"time_periods": 2, "node_ids": {"a": 0, "b": 1}, "0": snap, "1": snap, **kw}


def _chickenpox(**kw):
    return {"edges": [[0, 1], [1, 0]], "FX": [[float(i), i + 1.0] for i in range(6)], **kw}


@pytest.mark.parametrize("doc, needle", [
    (_twitter(node_ids={"a": 0, "b": "1"}), "key 'node_ids'"),
    (_twitter(time_periods="abc"), "key 'time_periods' is \"abc\""),
    (_twitter(time_periods=None), "key 'time_periods' is null"),
    (_twitter(time_periods=[3]), "key 'time_periods' is [3]"),
    (_twitter(time_periods=2.7), "key 'time_periods' is 2.7"),  # was read as 2
    (_chickenpox(FX=[[1e300, 1.0]] + [[1.0, 2.0]] * 5), "key 'FX': 1e+300 is beyond the range of float32"),
    (_chickenpox(FX=[[]] * 6, edges=[]), "no vertices"),  # was named after the output
    ({"nodes": [{"bus_stop": 5, "y": [1, 2, 3, 4, 5, 6]}, {"bus_stop": 6, "y": [1, 2, 3, 4, 5, 7]}],
      "links": [{"source": [0], "target": 6, "weight": 1}]}, "key 'links': endpoint [0]"),
    ("[" * 200_000, "nested too deeply"),
], ids=["node_ids", "tp_str", "tp_null", "tp_list", "tp_frac", "fx_float32", "n0", "link_list", "deep"])
def test_pygt_json_bad_values_are_one_line(tmp_path, capsys, doc, needle):
    raw = tmp_path / "in.json"
    raw.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    lags = ["--lags", "2"] if isinstance(doc, dict) and "FX" in doc else []
    _refused([str(raw), "--format", "pygt-json", *lags, "--output", str(tmp_path / "o")], capsys, str(raw), needle)


def test_chickenpox_node_ids_mixing_types_are_ignored_as_any_other_unusable_map(tmp_path, capsys):
    raw = tmp_path / "in.json"
    raw.write_text(json.dumps(_chickenpox(node_ids={"a": 0, "b": "1"})))
    _prepared([str(raw), "--format", "pygt-json", "--lags", "2", "--output", str(tmp_path / "o")], capsys)


# --------------------------------------------------------------------------- 2. tgb


GOOD = [(u % 3, u % 4, 10 * u, 0, 0.5) for u in range(20)]


def _tgb(tmp_path, rows=GOOD, raw=None, table=None):
    """A tiny tgbl-wiki directory; ``table`` maps the good negatives dict to the one written."""
    root = tmp_path / "tgbl_wiki"
    root.mkdir()
    text = raw if raw is not None else "user_id,item_id,timestamp,state_label,f1\n" + "".join(
        ",".join(map(str, r)) + "\n" for r in rows)
    (root / "tgbl-wiki_edgelist_v2.csv").write_text(text)
    good = {(u, i + 3, t): np.array([3, 4]) for u, i, t, *_ in rows if isinstance(t, int)}
    for split in ("val", "test"):
        (root / f"tgbl-wiki_{split}_ns_v2.pkl").write_bytes(pickle.dumps(table(good) if table else good))
    return root


@pytest.mark.parametrize("kw, needle", [
    (dict(rows=GOOD[:5] + [(1, 1, "inf", 0, 0.5)] + GOOD[5:]), "line 7"),
    (dict(rows=GOOD[:5] + [(1, 1, "1e30", 0, 0.5)] + GOOD[5:]), "timestamp '1e30' is not an int64 time"),
    (dict(raw="user_id,item_id,timestamp,state_label,f1\n1,1,100,0," + "1" * 200_000 + "\n"), "field limit"),
    (dict(rows=[(-3, 1, 5, 0, 0.5)] + GOOD), "edgelist_v2.csv: line 2: negative user_id -3"),
    # a quoted field spanning lines: the physical line, not the row's number
    (dict(raw="user_id,item_id,timestamp,state_label,f1\n1,2,10,0,\"0.5\n\"\n1,-4,20,0,0.5\n"),
     "edgelist_v2.csv: line 4: negative item_id -4"),
    (dict(table=lambda t: {5: np.array([1])}), "key 5 is not a (src, dst, t) triple"),
    (dict(table=lambda t: {("a", "b", "c"): np.array([1])}), "key ('a', 'b', 'c')"),
    (dict(table=lambda t: {k: np.array(["x"]) for k in t}), "are not integer node ids"),
    (dict(table=lambda t: {k: np.array([3.5]) for k in t}), "are not integer node ids"),  # was truncated to 3
], ids=["t_inf", "t_huge", "long_field", "neg_user", "neg_item_after_a_two_line_row", "key_int", "key_str",
        "neg_str", "neg_frac"])
def test_tgb_bad_values_are_one_line(tmp_path, capsys, kw, needle):
    root = _tgb(tmp_path, **kw)
    _refused([str(root), "--format", "tgb", "--output", str(tmp_path / "o")], capsys, needle)


def test_tgb_refuses_kind_snapshots(tmp_path, capsys):
    root = _tgb(tmp_path)
    _refused([str(root), "--format", "tgb", "--kind", "snapshots", "--output", str(tmp_path / "o")], capsys,
             "--kind snapshots does not apply to --format tgb")
    _prepared([str(root), "--format", "tgb", "--kind", "events", "--output", str(tmp_path / "o")], capsys)


@pytest.mark.parametrize("flag, value, needle", [
    ("--time-unit", "0", "--time-unit must be a positive number (got 0.0)"),
    ("--time-unit", "-1", "--time-unit must be a positive number (got -1.0)"),
    ("--time-unit", "nan", "--time-unit must be a positive number (got nan)"),
    ("--shard-events", "0", "--shard-events must be an integer >= 1 (got 0)"),
])
def test_tgb_refuses_a_time_unit_or_shard_size_the_other_formats_refuse(tmp_path, capsys, flag, value, needle):
    """``--format tgb`` passed ``--time-unit`` and ``--shard-events`` on unchecked: 0 was silently read as none
    (times and shards as without the option), -1 was refused as "'t' decreases at event 1" and NaN as "'t'
    contains NaN", naming no option; snap's and jodie's events refuse them in one line naming the option."""
    root = _tgb(tmp_path)
    _refused([str(root), "--format", "tgb", f"{flag}={value}", "--output", str(tmp_path / "o")], capsys,
             f"{root}: {needle}")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- 2./3. the Python API


def _signal(**kw):
    base = dict(edge_index=np.array([[0, 1, 2], [1, 2, 0]]), edge_weight=None, features=[np.ones((3, 2))] * 2,
                targets=[np.array([0, 1, 1])] * 2)
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("call, match", [
    (lambda o: from_arrays(S, D, T, o, weight=["a"] * 5, snapshots=2), r"weight: expected numbers"),
    (lambda o: from_arrays(S, D, T, o, kind="events", edge_features=[["a"]] * 5), r"edge_features: expected numbers"),
    (lambda o: from_arrays(S, D, T, o, num_vertices="5", snapshots=2), r"num_vertices: expected a whole number"),
    (lambda o: from_arrays(S, D, T, o, num_vertices=5.5, snapshots=2), r"num_vertices: expected a whole number"),
    (lambda o: from_arrays(S, D, T, o, shard_size="2", snapshots=2), r"shard_size: expected a whole number"),
    (lambda o: from_arrays(S, D, T, o, weight=[1, -5, 1, 1, 1], weights="given", snapshots=2),
     r"weight: negative weights \(min -5\)"),
    (lambda o: from_arrays(S, D, T, o, weight=[1, np.nan, 1, 1, 1], weights="given", snapshots=2),
     r"weight: nan at 1 is not a finite number"),
    (lambda o: from_arrays(S, D, T, o, weight=np.ones((5, 1)), snapshots=2), r"weight: shape \(5, 1\)"),
    (lambda o: from_signal(_signal(), o, shard_size="2"), r"shard_size: expected a whole number"),
    (lambda o: from_signal(_signal(features=[np.full((3, 2), "a")] * 2), o), r"features\[0\]: expected numbers"),
    (lambda o: from_signal(_signal(targets=[np.array(["a", "b", "c"])] * 2), o), r"targets\[0\]: expected numbers"),
    (lambda o: from_signal(_signal(edge_weight=np.array(["a", "b", "c"])), o), r"edge_weight\[0\]: expected num"),
    (lambda o: from_signal(_signal(edge_weight=np.array([1.0, -1.0, 1.0])), o), r"edge_weight\[0\]: negative"),
    (lambda o: from_signal(_signal(features=[np.array([[1, np.nan]] * 3)] * 2), o),
     r"features\[0\]: nan at \(0, 1\) is not a finite number"),
    (lambda o: from_signal(_signal(features=[np.array([[1, 1e300]] * 3)] * 2), o),
     r"features\[0\]: 1e\+300 at \(0, 1\) does not fit in float32"),
    (lambda o: from_signal(_signal(targets=[np.array([0, np.nan, 1])] * 2), o, labels=True),
     r"targets\[0\]: nan at 1 is not a class label"),
    (lambda o: from_signal(_signal(targets=[np.array([0.7, 1.6, 0.2])] * 2), o, labels=True),
     r"targets\[0\]: 0.7 at 0 is not a class label"),
    (lambda o: from_signal(_signal(targets=[np.zeros(3)] * 2), o, labels=True), r"at least 2 classes"),
    (lambda o: from_signal(_signal(targets=[np.array([0, 1, -3])] * 2), o, labels=True),
     r"targets\[0\]: -3 at 2 is not a class label"),
    (lambda o: from_signal(_signal(targets=[np.array([0, 1, 1e9])] * 2), o, labels=True),
     r"targets\[0\]: label 1e\+09 at 2 makes 1e\+09 classes"),
    # these two were named by the writer after the fact: "OUTPUT: snapshot 1: targets contain Inf", "... 2 weights"
    (lambda o: from_signal(_signal(targets=[np.zeros(3), np.array([0.5, -np.inf, np.nan])]), o),
     r"^from_signal: targets\[1\]: -inf at 1 is not a target \(NaN marks none"),
    (lambda o: from_signal(_signal(edge_weight=np.ones(2)), o),
     r"^from_signal: edge_weight\[0\]: shape \(2,\), expected \(3,\): one weight per edge of edge_index\[0\]"),
], ids=["w_str", "ef_str", "nv_str", "nv_frac", "shard_str", "w_neg", "w_nan", "w_2d", "sig_shard", "x_str",
        "y_str", "ew_str", "ew_neg", "x_nan", "x_f32", "lab_nan", "lab_frac", "lab_one", "lab_neg", "lab_huge",
        "y_inf", "ew_len"])
def test_api_refuses_what_it_would_store_wrong_in_one_line(tmp_path, call, match):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match=match):
            call(tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_a_stacked_signal_is_its_steps(tmp_path):
    m = from_signal(_signal(features=np.ones((2, 3, 2)), targets=np.array([[0, 1, 1]] * 2)), tmp_path / "o",
                    labels=True)
    assert (m.num_snapshots, m.num_vertices, m.num_features, m.num_classes) == (2, 3, 2, 2)


def test_a_1d_msg_is_one_edge_feature_as_in_from_arrays(tmp_path):
    data = SimpleNamespace(src=S, dst=D, t=T, msg=np.arange(5.0), num_nodes=5)
    assert from_temporal_data(data, tmp_path / "td").edge_feature_dim == 1
    assert from_arrays(S, D, T, tmp_path / "a", kind="events", edge_features=np.arange(5.0)).edge_feature_dim == 1


# --------------------------------------------------------------------------- 4. messages


def test_a_jodie_label_column_is_checked_only_when_used(tmp_path, capsys):
    raw = tmp_path / "j.csv"
    raw.write_text("user_id,item_id,timestamp,state_label,f\n1,2,3,2,0.5\n2,3,4,nan,0.1\n")
    _prepared([str(raw), "--format", "jodie", "--snapshots", "1", "--output", str(tmp_path / "o")], capsys)
    _refused([str(raw), "--format", "jodie", "--snapshots", "1", "--labels", "state", "--output",
              str(tmp_path / "o2")], capsys, "j.csv:3: state_label 'nan' is not a finite number")


def test_a_header_alone_suggests_columns_and_long_tokens_are_cut(tmp_path, capsys):
    raw = tmp_path / "h.txt"
    raw.write_text("src dst time\n")
    _refused([str(raw), "--format", "snap", "--output", str(tmp_path / "o")], capsys, "--columns src=src")
    raw.write_text("1 2 " + "9" * 200_000 + "\n")
    err = _refused([str(raw), "--format", "snap", "--output", str(tmp_path / "o")], capsys, "…' is not a finite")
    assert len(err) < 300


@pytest.mark.parametrize("magic, words", [(b"\x28\xb5\x2f\xfd\x24\x0c", "zstd-compressed"),
                                          (b"PK\x03\x04\x14\x00", "a zip archive")])
def test_a_zstd_or_zip_input_is_named_not_decoded(tmp_path, capsys, magic, words):
    """A .zst (TGB, Network Repository mirrors) or .zip (Network Repository's downloads) input is named with the
    command that extracts it, not reported as 'line 1: not UTF-8 text'."""
    p = tmp_path / "edges.bin"
    p.write_bytes(magic + bytes(range(256)))
    _refused([str(p), "--format", "snap", "--output", str(tmp_path / "o")], capsys, f"{p}: {words}, which prepare",
             "extract it first")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("fmt", ["snap", "jodie", "pygt-json"])
@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_a_tar_archive_is_named_not_read_as_its_member(tmp_path, capsys, fmt, mode):
    """A .tar / .tar.gz / .tar.bz2 (KONECT's downloads) holding the edge list is named with the command that
    extracts it: decompressed, its first line is the member's tar header, which read as a row ('line 2: expected 4
    columns like line 1')."""
    member = b"1 2 10\n2 3 20\n3 1 30\n"
    p = tmp_path / "out.edges.tar"
    with tarfile.open(p, mode) as tf:
        info = tarfile.TarInfo("out.edges")
        info.size = len(member)
        tf.addfile(info, io.BytesIO(member))
    _refused([str(p), "--format", fmt, "--output", str(tmp_path / "o")], capsys,
             f"{p}: a tar archive (first member 'out.edges')", f"tar xf {p}")
    assert not (tmp_path / "o").exists()


def test_text_with_ustar_where_a_tar_header_has_it_is_read(tmp_path, capsys):
    """'ustar' at byte 257 alone (an id 'mustard') is no tar archive: its header's checksum must agree too."""
    rows = "".join(f"a{i} b{i} {i}\n" for i in range(40))
    at = 257 - 2  # 'mustard' puts 'ustar' at byte 257
    text = rows[:at] + "\nmustard m " + "1" * 3 + "\n" + rows[at:]
    raw = tmp_path / "edges.txt"
    raw.write_text(text.replace("\n\n", "\n"))
    assert raw.read_bytes()[257:262] == b"ustar"
    _prepared([str(raw), "--format", "snap", "--snapshots", "2", "--output", str(tmp_path / "ds")], capsys)


@pytest.mark.parametrize("first", ["{x} 1 10", "[a] 1 10", "[1] 2 10"])
def test_an_id_that_starts_like_json_is_read(tmp_path, capsys, first):
    """Only a JSON object's first key (or an array of containers or strings) is JSON: ids like '{x}' or '[1]'
    were refused as 'a JSON document'."""
    raw = tmp_path / "edges.txt"
    raw.write_text(first + "\n2 3 20\n3 1 30\n")
    _prepared([str(raw), "--format", "snap", "--snapshots", "2", "--output", str(tmp_path / "ds")], capsys)


@pytest.mark.parametrize("fmt, text, columns", [
    ("jodie", "user_id\titem_id\ttimestamp\tstate_label\n0\t0\t1.0\t0\n1\t1\t2.0\t0\n", None),
    ("jodie", "user_id\titem_id\ttimestamp\tstate_label\n0\t0\t1.0\t0\n1\t1\t2.0\t0\n",
     "src=user_id,dst=item_id,time=timestamp"),  # the advice before: --columns, which found no such column
    ("jodie", "u;i;ts;label\n0;0;1,5;0\n1;1;2,5;0\n", None),  # a spreadsheet's export in a comma-decimal locale
    ("snap", "1;2;10\n2;3;20\n", None),
    ("snap", "src;dst;time\n1;2;10\n2;3;20\n", "src=src,dst=dst,time=time"),
    ("snap", "1|2|10\n2|3|20\n", None),
])
def test_fields_split_by_a_separator_the_reader_does_not_split_on_are_named(tmp_path, capsys, fmt, text, columns):
    """A tab-, semicolon- or '|'-separated file was 'expected 3 or 4 columns, got 1' or a header to map with
    --columns (which then found no column either): the line is refused naming the separator it holds."""
    raw = tmp_path / "edges.csv"
    raw.write_text(text)
    sep = {"\t": "tabs", ";": "semicolons", "|": "'|'"}[next(c for c in "\t;|" if c in text)]
    args = [str(raw), "--format", fmt, "--output", str(tmp_path / "o"), *(["--columns", columns] if columns else [])]
    _refused(args, capsys, f"{raw}:1: fields separated by {sep}", f"--format {fmt} reads", "convert the file")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("fmt", ["snap", "jodie"])
def test_a_json_file_or_a_prepared_dataset_given_as_input_is_named(tmp_path, capsys, fmt):
    """PyG Temporal's json given to snap or jodie read as rows ('text after the closing quote of a quoted field'),
    and so did a dataset's manifest.json; the dataset's directory was 'a directory': each is named, with what to
    give instead."""
    (tmp_path / "chickenpox.json").write_text(json.dumps({"edges": [[0, 1]], "FX": [[1.0, 2.0]] * 6}, indent=1))
    _refused([str(tmp_path / "chickenpox.json"), "--format", fmt, "--output", str(tmp_path / "o")], capsys,
             f"chickenpox.json: a JSON document, not a --format {fmt} edge list", "--format pygt-json")
    raw = tmp_path / "edges.txt"
    raw.write_text("1 2 10\n2 3 20\n")
    _prepared([str(raw), "--format", "snap", "--output", str(tmp_path / "ds")], capsys)
    _refused([str(tmp_path / "ds" / "manifest.json"), "--format", fmt, "--output", str(tmp_path / "o")], capsys,
             "manifest.json: a JSON document", "give its directory as data.path")
    _refused([str(tmp_path / "ds"), "--format", fmt, "--output", str(tmp_path / "o")], capsys,
             f"{tmp_path / 'ds'}: is a dataset directory (it holds manifest.json)", "data.path")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("slicing", [["--snapshots", "1"], ["--events-per-snapshot", "10"], ["--window", "100"]])
@pytest.mark.parametrize("task", [["--labels", "next_activity"], ["--targets", "next_degree"],
                                  ["--targets", "next_log_degree"]])
def test_next_step_labels_or_targets_of_a_single_snapshot_are_refused(tmp_path, capsys, slicing, task):
    """Snapshot t's next_* labels or targets come from snapshot t+1, so one snapshot's were all -1 or NaN: a dataset
    written without a word that no node classification or regression could train on."""
    raw = tmp_path / "edges.txt"
    raw.write_text("1 2 10\n2 3 20\n3 1 30\n")
    _refused([str(raw), "--format", "snap", "--output", str(tmp_path / "o"), *slicing, *task], capsys,
             f"{raw}: with {' '.join(task)}, snapshot t's values come from snapshot t+1", "makes 1 snapshot")
    assert not (tmp_path / "o").exists()
    _prepared([str(raw), "--format", "snap", "--output", str(tmp_path / "two"), "--snapshots", "2", *task], capsys)
    with pytest.raises(DataError, match=r"from_arrays: with labels='next_activity', .* makes 1 snapshot"):
        from_arrays(S, D, T, tmp_path / "api", snapshots=1, labels="next_activity")
    assert not (tmp_path / "api").exists()


@pytest.mark.parametrize("text, line, comment", [
    ("1 2 10 # from the log\n2 3 20\n", 1, "'# from the log'"),  # was "found a header line": map it with --columns
    ("1 2 10\n2 3 20 % retried\n3 1 30\n", 2, "'% retried'"),  # was "expected 3 columns like line 1, got 5"
    ("1 2 #10\n2 3 20\n", 1, "'#10'"),
])
def test_a_comment_after_the_data_of_a_row_is_named(tmp_path, capsys, text, line, comment):
    """A row ending in a comment is refused naming the comment, not as a header or a row of other width; an id
    starting with '#' (a hashtag graph) is still an id."""
    raw = tmp_path / "edges.txt"
    raw.write_text(text)
    _refused([str(raw), "--format", "snap", "--output", str(tmp_path / "o")], capsys,
             f"{raw}:{line}: {comment} after the data is a comment", f"sed 's/[[:space:]]*{comment[1]}.*//'")
    assert not (tmp_path / "o").exists()
    raw.write_text("alice #hpc 10\n#hpc bob 20\nbob #hpc 30\n")  # line 2 is a comment line, as documented
    _prepared([str(raw), "--format", "snap", "--output", str(tmp_path / "tags"), "--snapshots", "2"], capsys)
    assert load_manifest(tmp_path / "tags").num_vertices == 3


# --------------------------------------------------------------------------- 5. a last line cut short

#: ``src dst time`` rows in time order, each time ten digits as SNAP's epoch seconds
_ROWS = "1 2 1082040961\n3 4 1082155839\n5 6 1082414391\n"


@pytest.mark.parametrize("fmt, text, why", [
    ("snap", _ROWS + "7 8 10826", "fewer characters than every other row's (10 or more)"),
    ("snap", "1 2 5\n2 3 10\n3 4 100\n4 5 1", "its time is before the row above"),
    ("jodie", "u,i,ts,f\n1,2,3,0.125\n2,3,4,0.250\n3,4,5,0.", "fewer characters than every other row's"),
])
@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_last_line_cut_mid_number_is_refused(tmp_path, capsys, fmt, text, why, kind):
    """A plain file cut mid-number (an interrupted download) ends without a newline, its last number short: one
    line naming the file and line, not a wrong event; nothing is written."""
    raw = tmp_path / "cut.txt"
    raw.write_text(text)
    lineno = text.count("\n") + 1
    _refused([str(raw), "--format", fmt, "--kind", kind, "--output", str(tmp_path / "o")], capsys,
             f"cut.txt:{lineno}: the file ends without a newline", why, "end the file with a newline")
    assert not (tmp_path / "o").exists()
    raw.write_text(text + "\n")  # the user's way out: the line is whole
    _prepared([str(raw), "--format", fmt, "--kind", kind, "--output", str(tmp_path / "o")], capsys)


def test_a_last_line_without_newline_that_looks_whole_is_read_with_a_warning(tmp_path, capsys):
    raw = tmp_path / "e.txt"
    raw.write_text(_ROWS + "7 8 1082654051")
    assert main(["prepare", str(raw), "--format", "snap", "--snapshots", "2", "--output", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "warning: " + str(raw) + ":4: the file ends without a newline after '7 8 1082654051'" in err, err
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["source"]["events"] == 4 and m["source"]["time_max"] == 1082654051


@pytest.mark.parametrize("text", [_ROWS, _ROWS.replace("\n", "\r\n"), _ROWS + "# end", _ROWS + "\n\n"])
def test_files_ending_in_a_newline_or_a_comment_are_read_silently(tmp_path, capsys, text):
    raw = tmp_path / "e.txt"
    raw.write_bytes(text.encode())
    assert main(["prepare", str(raw), "--format", "snap", "--snapshots", "2", "--output", str(tmp_path / "o")]) == 0
    assert "newline" not in capsys.readouterr().err


def test_a_tgb_edge_list_cut_mid_number_is_refused(tmp_path, capsys):
    """TGB's csv too: its last feature cut short would find the event's negatives and pass as a wrong value."""
    text = "user_id,item_id,timestamp,state_label,f1\n" + "".join(",".join(map(str, r)) + "\n" for r in GOOD)
    root = _tgb(tmp_path, raw=text[:-3])  # '...,0.5\n' -> '...,0.'
    _refused([str(root), "--format", "tgb", "--output", str(tmp_path / "o")], capsys,
             "edgelist_v2.csv:21: the file ends without a newline", "fewer characters than every other row's")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("fmt", ["snap", "jodie", "pygt-json"])
@pytest.mark.parametrize("text, words", [
    ("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 12345\n", "a Git LFS pointer"),
    ("\n<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n", "an HTML page"),
    ("\ufeff<!DOCTYPE html>\n<html><body>404</body></html>\n", "an HTML page"),  # a BOM first, dropped as by the reader
])
def test_what_stands_in_for_the_data_is_named(tmp_path, capsys, fmt, text, words):
    """A clone without ``git lfs pull`` or a download that saved an error page: said so, not 'expected 3 or 4
    columns' or 'invalid JSON'."""
    raw = tmp_path / "CollegeMsg.txt"
    raw.write_text(text)
    _refused([str(raw), "--format", fmt, "--output", str(tmp_path / "o")], capsys, f"{raw}: {words}, not")


@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_headerless_jodie_csv_is_told_to_map_columns_by_index(tmp_path, capsys, kind):
    """Not 'map the columns with --columns src=NAME': there are no names to map."""
    raw = tmp_path / "j.csv"
    raw.write_text("1,2,0,0,0.1\n3,4,5,0,0.2\n")
    _refused([str(raw), "--format", "jodie", "--kind", kind, "--output", str(tmp_path / "o")], capsys,
             "j.csv:1: no header line", "--columns src=0,dst=1,time=2")
    _prepared([str(raw), "--format", "jodie", "--kind", kind, "--columns", "src=0,dst=1,time=2", "--output",
               str(tmp_path / "o")], capsys)


@pytest.mark.parametrize("kind", ["snapshots", "events"])
@pytest.mark.parametrize("text, line", [("582 364 0\n168 472 2797\n", 1),  # SNAP's email-Eu-core-temporal
                                        ("src dst time\n582 364 0\n168 472 2797\n", 2)])
@pytest.mark.parametrize("columns", [None, "src=0,dst=1,time=2"])
def test_a_whitespace_separated_edge_list_given_to_jodie_names_format_snap(tmp_path, capsys, kind, text, line,
                                                                            columns):
    """'got '582 364 0' (1 columns) ... map the columns with --columns', and with the --columns then given, 'the
    header has 1 columns': no column mapping reads one comma-separated field; --format snap reads the file."""
    raw = tmp_path / "email.txt"
    raw.write_text(text)
    args = ["--kind", kind, "--output", str(tmp_path / "o"), *(["--columns", columns] if columns else [])]
    err = _refused([str(raw), "--format", "jodie", *args], capsys, f"email.txt:{line}: fields separated by "
                   "whitespace ('582', '364', '0' (3 columns))", "read it with --format snap")
    assert "--columns src=NAME" not in err and "weight time" not in err
    if line == 1:  # a header needs --columns by name in snap too
        _prepared([str(raw), "--format", "snap", *args], capsys)


def test_a_whitespace_jodie_export_is_not_sent_to_snap_unwarned(tmp_path, capsys):
    """A whitespace-separated user item time label export was sent to --format snap, which reads its time as a
    weight and its label as the time, silently: the line now says what snap makes of 4 columns."""
    raw = tmp_path / "wiki.txt"
    raw.write_text("0 5 10 0\n1 6 20 1\n")
    _refused([str(raw), "--format", "jodie", "--kind", "events", "--output", str(tmp_path / "o")], capsys,
             "read it with --format snap", "snap reads 4 columns as src dst weight time: a file of user item time "
             "label (JODIE's) must be made comma-separated with a header for --format jodie instead")


@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_matrix_market_size_line_is_not_an_event(tmp_path, capsys, kind):
    """Network Repository's .mtx: the 'M N NNZ' line after the banner was read as an event (a self-loop 5 -> 5 at
    time 3); a dense array holds no edges and is refused."""
    mtx = tmp_path / "g.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate integer general\n% a comment\n5 5 3\n1 2 100\n2 3 200\n4 5 300\n")
    opts = ["--snapshots", "2"] if kind == "snapshots" else ["--kind", "events"]
    _prepared([str(mtx), "--format", "snap", *opts, "--output", str(tmp_path / "o")], capsys)
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["source"]["events"] == 3 and (m.get("time_range") or [m["source"]["time_min"]])[0] == 100
    mtx.write_text("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n")
    _refused([str(mtx), "--format", "snap", *opts, "--output", str(tmp_path / "o2")], capsys,
             "g.mtx: a dense MatrixMarket array, not an edge list")


# --------------------------------------------------------------------------- quoted csv fields


def _csv(rows: list[list[object]], quoting: int) -> str:
    """``rows`` as Python's csv writes them (pandas' ``to_csv(quoting=...)`` quotes the same way)."""
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, quoting=quoting, lineterminator="\n").writerows(rows)
    return buf.getvalue()


_EVENTS = [[u % 4, 10 + u % 3, 1082040961 + 60 * u, u % 2, round(0.25 * u, 2)] for u in range(12)]


def _original_ids(dataset) -> list[str]:
    """The input's id of each vertex of a prepared dataset, as text."""
    import h5py

    with h5py.File(dataset / "vertices.h5") as f:
        return [v.decode() if isinstance(v, bytes) else str(v) for v in f["original_id"][()]]


@pytest.mark.parametrize("quoting", ["all", "nonnumeric"])
@pytest.mark.parametrize("fmt, header, columns", [
    ("snap", None, None),  # src dst weight time, positional
    ("snap", ["s", "d", "w", "t"], "src=s,dst=d,time=t,weight=w"),
    ("jodie", ["user_id", "item_id", "timestamp", "state_label", "f"], None),
])
def test_quoted_csv_fields_read_as_the_numbers_they_are(tmp_path, capsys, quoting, fmt, header, columns):
    """``"1","2","1082040961"`` (pandas' QUOTE_ALL, spreadsheet exports; QUOTE_NONNUMERIC quotes the header alone)
    was refused as unparsable: it reads as the unquoted file does, header included."""
    import csv

    rows = [[r[0], r[1], r[4], r[2]] for r in _EVENTS] if fmt == "snap" else _EVENTS
    mode = csv.QUOTE_ALL if quoting == "all" else csv.QUOTE_NONNUMERIC
    if mode == csv.QUOTE_NONNUMERIC:  # ids as strings, quoted; the numbers not
        rows = [[str(r[0]), str(r[1]), *r[2:]] for r in rows]
    lines = ([header] if header else []) + rows
    quoted, plain = tmp_path / "quoted.csv", tmp_path / "plain.csv"
    quoted.write_text(_csv(lines, mode))
    plain.write_text(_csv(lines, csv.QUOTE_MINIMAL))
    assert '"' in quoted.read_text() and '"' not in plain.read_text()
    opts = ["--columns", columns] if columns else []
    for kind in ("snapshots", "events"):
        made = {}
        for f in (quoted, plain):
            out = tmp_path / f"{f.stem}-{kind}"
            _prepared([str(f), "--format", fmt, "--kind", kind, *opts, "--output", str(out)], capsys)
            m = json.loads((out / "manifest.json").read_text())
            m.pop("source")  # the input's path, size and sha256
            m.pop("shards")  # their sha256 covers the provenance too; the counts compared are in the manifest
            made[f] = m, _original_ids(out)
        assert made[quoted] == made[plain]
    if fmt == "jodie":  # the edge features, value for value
        from hpcdgnn.data.prepare._common import remap_ids
        from hpcdgnn.data.prepare.jodie import parse_jodie_events

        a, b = parse_jodie_events(quoted, None), parse_jodie_events(plain, None)
        # ids as prepare maps them (the plain file's are read as int64, the quoted file's as tokens)
        assert all(np.array_equal(x, y) for k in (0, 1) for x, y in zip(remap_ids(a[k]), remap_ids(b[k]), strict=True))
        assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3]) and a[4] == b[4] == ["f"]


@pytest.mark.parametrize("fmt, text, line, words", [
    ("snap", '"1","2","100"\n"2","3,"200"\n', 2, "text after the closing '\"'"),
    ("snap", '"1","2","100"\n"2","3","200\n"3","4","300"\n', 2, "a quoted field does not close"),
    ("snap", '1 2 100\n2 "3 200\n', 2, "a quoted field does not close"),
    ("snap", '"1","2","100"\n"2","3","2OO"\n', 2, "cannot parse time '2OO'"),
    ("jodie", 'u,i,ts\n"1","2","100"\n"2","3","abc"\n', 3, "cannot parse time column 'ts' 'abc'"),
    ("jodie", '"u","i","ts\n"1","2","100"\n', 1, "a quoted field does not close"),
    ("jodie", 'u,i,ts,f\n"1","2","100","0.5"\n"2","3","200","0.5\n', 3, "a quoted field does not close"),
])
@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_bad_quote_or_quoted_text_is_one_line_naming_file_and_line(tmp_path, capsys, fmt, text, line, words, kind):
    """A quote that does not close on its line (the rest of the file is not read as one field), text after a
    closing quote, or quoted text where a number belongs: one line naming ``file:line``, nothing written."""
    raw = tmp_path / "q.csv"
    raw.write_text(text)
    _refused([str(raw), "--format", fmt, "--kind", kind, "--output", str(tmp_path / "o")], capsys,
             f"q.csv:{line}: ", words)
    assert not (tmp_path / "o").exists()


def test_quoted_columns_mapped_by_name_and_a_quote_in_an_unquoted_field(tmp_path, capsys):
    """``--columns`` names match a quoted header; a ``"`` inside an unquoted field is text (an id ``a"b``), as
    csv readers take it; a comma inside a quoted id stays in the id."""
    raw = tmp_path / "ids.csv"
    raw.write_text('"from","to","when"\na"b,"x,y",100\n"x,y",c,200\n')
    _prepared([str(raw), "--format", "snap", "--columns", "src=from,dst=to,time=when", "--snapshots", "1",
               "--output", str(tmp_path / "o")], capsys)
    assert sorted(_original_ids(tmp_path / "o")) == ['a"b', "c", "x,y"]


@pytest.mark.parametrize("header, columns", [
    (None, None),  # positional src dst time
    (None, "src=0,dst=1,time=2"),  # by index: line 1 is data
    ("from to when", "src=from,dst=to,time=when"),  # by name: line 2 is the first data row
])
@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_comma_inside_a_quoted_id_does_not_make_a_whitespace_file_comma_separated(
        tmp_path, capsys, header, columns, kind):
    """A whitespace-separated file whose first lines hold a quoted id with a comma (``"a,b" 2 5``) was refused
    ("text after the closing quote"): the separator was chosen by any comma on the line, quotes or not."""
    rows = ['"a,b" 2 5', '"c,d" "a,b" 6', "x y 7"]
    raw = tmp_path / "ids.txt"
    raw.write_text("\n".join(([header] if header else []) + rows) + "\n")
    opts = ["--columns", columns] if columns else []
    _prepared([str(raw), "--format", "snap", "--kind", kind, *opts, "--output", str(tmp_path / "o")], capsys)
    assert sorted(_original_ids(tmp_path / "o")) == ["2", "a,b", "c,d", "x", "y"]


def test_a_tgb_blank_after_a_closing_quote_reads_as_pandas_reads_it(tmp_path, capsys):
    """``"2" ,3`` (blanks after a closing quote) was refused by the strict csv reader; TGB reads the file with
    pandas' read_csv (C parser), where the blank joins the field ('2 ') and the number reads as 2: the dataset is the
    unquoted file's. Text after a closing quote (``"2"x``) joins the field too, so it is a bad id, on its line."""
    from hpcdgnn.data.prepare.tgb import read_tgb

    header = "user_id,item_id,timestamp,state_label,f1\n"
    blanks = ['"{}" ', '"{}"\t', '"{}"  ', "{}", '" {} "']
    quoted = header + "".join(",".join(blanks[(i + j) % len(blanks)].format(x) for j, x in enumerate(r)) + "\n"
                              for i, r in enumerate(GOOD))
    assert '"0" ,' in quoted and '"0.5"\t\n' in quoted
    root = _tgb(tmp_path)
    plain = read_tgb(root)
    (root / "tgbl-wiki_edgelist_v2.csv").write_text(quoted)
    got = read_tgb(root)
    for a, b in zip(got[1:5], plain[1:5], strict=True):  # src, dst, t, features
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert got[5:9] == plain[5:9]  # N, S, feature names, split
    for k in ("val", "test"):
        assert all(np.array_equal(x, y) for x, y in zip(got[9][k], plain[9][k], strict=True))
    _prepared([str(root), "--format", "tgb", "--output", str(tmp_path / "o")], capsys)
    lines = quoted.splitlines()
    lines[4] = '"1"x,1,30,0,0.5'
    (root / "tgbl-wiki_edgelist_v2.csv").write_text("\n".join(lines) + "\n")
    _refused([str(root), "--format", "tgb", "--output", str(tmp_path / "o2")], capsys,
             "edgelist_v2.csv: line 5: ", "'1x'")


@pytest.mark.parametrize("end", ["\n", ""])
def test_a_tgb_quote_opened_on_the_last_line_is_refused(tmp_path, capsys, end):
    """Read as pandas reads it (text after a closing quote allowed), a quote that never closes is still pandas'
    "EOF inside string": one line naming the line it opens on, here the last."""
    text = "user_id,item_id,timestamp,state_label,f1\n" + "".join(",".join(map(str, r)) + "\n" for r in GOOD)
    root = _tgb(tmp_path, raw=text[:-4] + '"0.5' + end)
    _refused([str(root), "--format", "tgb", "--output", str(tmp_path / "o")], capsys,
             f"edgelist_v2.csv: line {len(GOOD) + 1}: ", "a quoted field opened on this line does not close")


def test_a_tgb_quote_that_never_closes_names_the_line_it_opens(tmp_path, capsys):
    """TGB's csv is read as TGB (pandas) reads it, a quoted field may span lines; one that never closes swallowed
    the rest of the file as one field (an error naming the last line, or with more columns than read, nothing)."""
    lines = ["user_id,item_id,timestamp,state_label,f1"] + [",".join(map(str, r)) for r in GOOD]
    lines[6] = lines[6].replace("0.5", '"0.5')  # line 7
    root = _tgb(tmp_path, raw="\n".join(lines) + "\n")
    _refused([str(root), "--format", "tgb", "--output", str(tmp_path / "o")], capsys,
             "edgelist_v2.csv: line 7: ", "a quoted field opened on this line does not close")
    quoted = "user_id,item_id,timestamp,state_label,f1\n" + "".join(",".join(f'"{x}"' for x in r) + "\n" for r in GOOD)
    (root / "tgbl-wiki_edgelist_v2.csv").write_text(quoted)
    _prepared([str(root), "--format", "tgb", "--output", str(tmp_path / "o")], capsys)
