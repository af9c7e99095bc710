"""Tests of ``prepare``'s header variants, ``--columns`` and the output-size guard (user issue on real data).

The JODIE wikipedia/reddit csv circulates as the original release
(``user_id,item_id,timestamp,state_label,...``) and as TGL/TGN copies
(``u,i,ts,label,...``; ``ml_*.csv`` with a pandas index column). None is in
``../shared/data``, so each variant is written here from one tiny table and must
give the dataset the original header gives. The size guard is tested on a tiny
input with a huge ``--snapshots`` (refused before anything is written) and its
estimate against the measured size of ordinary prepares.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest

import hpcdgnn.data.prepare as prepare
from hpcdgnn.__main__ import main
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.prepare import prepare_dataset
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.errors import DataError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"

#: (user, item, time, state label, two edge features): the rows of every JODIE variant below.
ROWS = [(7, 100, "0.0", 0), (3, 100, "1.0", 0), (7, 101, "2.0", 1), (3, 101, "3.0", 0), (7, 100, "4.0", 0),
        (12, 5, "4.0", 0)]


def _jodie(header: str, index: str | None = None, trailing_idx: bool = False) -> str:
    """The ROWS under ``header``: with a leading index column (``index`` = its header name) and/or a trailing idx."""
    lines = [header]
    for k, (u, i, t, s) in enumerate(ROWS):
        row = f"{u},{i},{t},{s},0.{k},0.{k + 1}" if not trailing_idx else f"{u},{i},{t},{s},{k + 1}"
        lines.append(row if index is None else f"{k},{row}")
    return "\n".join(lines) + "\n"


VARIANTS = {
    "jodie": _jodie("user_id,item_id,timestamp,state_label,comma_separated_list_of_features"),
    "tgl": _jodie("u,i,ts,label,f0,f1"),
    "tgl_ml": _jodie(",u,i,ts,label,idx", index="", trailing_idx=True),
    "idx_first": _jodie("idx,user_id,item_id,timestamp,state_label,f0,f1", index="idx"),
}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _dataset(root: Path) -> tuple:
    """Everything a JODIE prepare decides: ids, edges, labels and windows of every snapshot."""
    m = load_manifest(root)
    with h5py.File(root / "vertices.h5") as f:
        ids = [i.decode() for i in f["original_id"][()].tolist()]
    with ShardReader(root, m) as r:
        edges = [sorted(zip(*(a.tolist() for a in r.read_target(t)), strict=True)) for t in range(m.num_snapshots)]
        labels = [r.read(t).labels.tolist() for t in range(m.num_snapshots)] if m.num_classes else None
    return ids, edges, labels, m.snapshot_time, m.snapshot_nnz


def _size(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


# --------------------------------------------------------------------------- JODIE header variants


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_jodie_header_variants_give_the_same_dataset(tmp_path, variant):
    """Original, TGL, TGL ml_ (unnamed index column, trailing idx) and idx-first headers read the same table."""
    ref = prepare_dataset(_write(tmp_path, "ref.csv", VARIANTS["jodie"]), "jodie", tmp_path / "ref", snapshots=2,
                          labels="state")
    m = prepare_dataset(_write(tmp_path, f"{variant}.csv", VARIANTS[variant]), "jodie", tmp_path / variant,
                        snapshots=2, labels="state")
    assert _dataset(tmp_path / variant) == _dataset(tmp_path / "ref")
    assert m.num_vertices == ref.num_vertices == 6
    assert _dataset(tmp_path / "ref")[2][1] == [0, 1, 0, -1, -1, -1]  # user 7 changed state in window 1


def test_jodie_original_header_keeps_positional_rule(tmp_path):
    """Any header whose first names contain user/item reads columns 0-3 positionally, as before the variants."""
    text = VARIANTS["jodie"].replace("user_id,item_id,timestamp,state_label", "users,items,when,state", 1)
    prepare_dataset(_write(tmp_path, "old.csv", text), "jodie", tmp_path / "old", snapshots=2, labels="state")
    prepare_dataset(_write(tmp_path, "ref.csv", VARIANTS["jodie"]), "jodie", tmp_path / "ref", snapshots=2,
                    labels="state")
    assert _dataset(tmp_path / "old") == _dataset(tmp_path / "ref")
    assert load_manifest(tmp_path / "old").source["columns"] == {
        "src": "user", "dst": "item", "time": "timestamp", "label": "state_label"}


def test_jodie_without_label_column(tmp_path):
    """A header without a label is fine unless --labels state asks for one."""
    text = "u,i,ts\n" + "".join(f"{u},{i},{t}\n" for u, i, t, _ in ROWS)
    p = _write(tmp_path, "nolabel.csv", text)
    m = prepare_dataset(p, "jodie", tmp_path / "a", snapshots=2)
    assert m.num_vertices == 6 and sum(m.snapshot_edges) == 6
    with pytest.raises(DataError, match=r"nolabel\.csv: --labels state needs a state label column"):
        prepare_dataset(p, "jodie", tmp_path / "b", snapshots=2, labels="state")


def test_jodie_unknown_header_lists_it_and_names_columns_option(tmp_path):
    """An unrecognised header is reported as found, with the --columns syntax; nothing is written."""
    text = VARIANTS["tgl"].replace("u,i,ts,label", "who,what,when,flag", 1)
    p = _write(tmp_path, "odd.csv", text)
    with pytest.raises(DataError) as e:
        prepare_dataset(p, "jodie", tmp_path / "o")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}:1: expected the JODIE header")
    assert "'who', 'what', 'when', 'flag', 'f0', 'f1' (6 columns)" in msg
    assert "--columns src=NAME,dst=NAME,time=NAME[,label=NAME]" in msg
    assert not (tmp_path / "o").exists()
    # the same file, mapped
    prepare_dataset(p, "jodie", tmp_path / "o", snapshots=2, labels="state",
                    columns="src=who,dst=what,time=when,label=flag")
    prepare_dataset(_write(tmp_path, "ref.csv", VARIANTS["jodie"]), "jodie", tmp_path / "ref", snapshots=2,
                    labels="state")
    assert _dataset(tmp_path / "o") == _dataset(tmp_path / "ref")


def test_jodie_columns_by_index_reordered_and_headerless(tmp_path):
    """--columns by 0-based index reads reordered columns, with or without a header line."""
    body = "".join(f"{t},{i},x,{s},{u}\n" for u, i, t, s in ROWS)  # time, item, junk, label, user
    spec = "src=4,dst=1,time=0,label=3"
    prepare_dataset(_write(tmp_path, "h.csv", "a,b,c,d,e\n" + body), "jodie", tmp_path / "h", snapshots=2,
                    labels="state", columns=spec)
    prepare_dataset(_write(tmp_path, "n.csv", body), "jodie", tmp_path / "n", snapshots=2, labels="state",
                    columns=spec)
    prepare_dataset(_write(tmp_path, "ref.csv", VARIANTS["jodie"]), "jodie", tmp_path / "ref", snapshots=2,
                    labels="state")
    assert _dataset(tmp_path / "h") == _dataset(tmp_path / "n") == _dataset(tmp_path / "ref")


@pytest.mark.parametrize("kind", ["snapshots", "events"])
@pytest.mark.parametrize("text, fields, names", [
    # JODIE's header naming its features one by one, more of them than the rows hold
    (_jodie("user_id,item_id,timestamp,state_label,f0,f1,f2,f3"), 6, 8),
    # TGN's ml_ header over rows without its index column: each role would be read from its neighbour's column
    (_jodie(",u,i,ts,label,idx", trailing_idx=True), 5, 6),
    # rows with an index column under a header without it (the users read from the index, the items as users)
    (_jodie("u,i,ts,label,idx", index="", trailing_idx=True), 6, 5),
], ids=["jodie_names_more", "ml_rows_without_index", "rows_with_unnamed_index"])
def test_jodie_header_and_rows_of_other_widths_are_refused(tmp_path, kind, text, fields, names):
    """A header that names more or fewer columns than the rows hold is one line for either kind, not a dataset
    read from shifted columns; JODIE's own header (one name for all the features) stays exempt (variants above)."""
    p = _write(tmp_path, "w.csv", text)
    with pytest.raises(DataError, match=rf"w\.csv:2: {fields} fields, but the header names {names} ") as e:
        prepare_dataset(p, "jodie", tmp_path / "o", kind=kind)
    assert "\n" not in str(e.value) and not (tmp_path / "o").exists()


def test_jodie_snapshot_rows_of_another_width_are_refused(tmp_path):
    """A row with a field more or less than the first is refused for snapshots as for events (its columns moved)."""
    lines = VARIANTS["tgl"].splitlines()
    lines[3] += ",0.9"
    p = _write(tmp_path, "r.csv", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"r\.csv:4: expected 6 fields like line 2, got 7"):
        prepare_dataset(p, "jodie", tmp_path / "o", snapshots=2)


@pytest.mark.parametrize("fmt", ["snap", "jodie"])
@pytest.mark.parametrize("kind", ["snapshots", "events"])
@pytest.mark.parametrize("text, fields, names", [
    # TGL's edges.csv header over rows without its index column: src read from dst, dst from time, time from ext_roll
    (",src,dst,time,ext_roll\n" + "".join(f"{u},{i},{t},0\n" for u, i, t, _ in ROWS), 4, 5),
    # rows with a leading index column under a header without it: src read from the index, time from dst
    ("src,dst,time\n" + "".join(f"{k},{u},{i},{t}\n" for k, (u, i, t, _) in enumerate(ROWS)), 4, 3),
], ids=["header_names_an_index_the_rows_lack", "rows_hold_an_index_the_header_lacks"])
def test_columns_by_name_under_a_header_of_another_width_are_refused(tmp_path, fmt, kind, text, fields, names):
    """--columns by name reads the header's names: a header of another width than the rows would take each column
    from its neighbour (ids as times, silently); refused in one line. By index the rows' own columns are read."""
    p = _write(tmp_path, "w.csv", text)
    with pytest.raises(DataError, match=rf"w\.csv:2: {fields} fields, but the header names {names} ") as e:
        prepare_dataset(p, fmt, tmp_path / "o", kind=kind, columns="src=src,dst=dst,time=time")
    assert "\n" not in str(e.value) and "--columns by 0-based index" in str(e.value)
    assert not (tmp_path / "o").exists()
    if names > fields:  # the rows' own columns by index: the header's names are not read
        m = prepare_dataset(p, fmt, tmp_path / "o", kind=kind, columns="src=0,dst=1,time=2")
        assert m.source["events"] == len(ROWS)


def test_snap_columns_rows_of_another_width_are_refused(tmp_path):
    """With --columns, a row with a field more than the first is refused as without (a weight read as the time)."""
    p = _write(tmp_path, "r.txt", "1 2 10\n2 3 11\n3 1 5 12\n1 3 13\n")
    with pytest.raises(DataError, match=r"r\.txt:3: expected 3 columns like line 1, got 4"):
        prepare_dataset(p, "snap", tmp_path / "o", snapshots=2, columns="src=0,dst=1,time=2")


def test_jodie_own_header_mapped_by_name_is_read(tmp_path):
    """JODIE's own header, one name for all the features, stays exempt when --columns names its columns."""
    p = _write(tmp_path, "j.csv", VARIANTS["jodie"])
    m = prepare_dataset(p, "jodie", tmp_path / "o", kind="events", columns="src=user_id,dst=item_id,time=timestamp")
    assert m.num_events == len(ROWS) and m.edge_feature_dim == 2


# --------------------------------------------------------------------------- SNAP with a header / --columns


def test_snap_header_is_reported_with_a_mapping(tmp_path):
    """--format snap on a TGL csv no longer misreads the header: it suggests --columns (and --format jodie)."""
    p = _write(tmp_path, "tgl.csv", VARIANTS["tgl"])
    with pytest.raises(DataError) as e:
        prepare_dataset(p, "snap", tmp_path / "o")
    msg = str(e.value)
    assert msg.startswith(f"{p}:1: found a header line ('u', 'i', 'ts', 'label'")
    assert "--columns src=u,dst=i,time=ts" in msg and "--format jodie" in msg
    four = _write(tmp_path, "four.csv", "u,i,ts,label\n1,2,5,0\n2,3,6,1\n")  # 4 columns: once read as weight + time
    with pytest.raises(DataError, match=r"four\.csv:1: found a header line"):
        prepare_dataset(four, "snap", tmp_path / "o")


def test_snap_columns_by_name_and_index_match_plain(tmp_path):
    """A csv with a header and extra columns, mapped by name or index, equals the plain 'src dst weight time' file."""
    plain = _write(tmp_path, "plain.txt", "10 20 2 0\n20 30 1 1\n10 20 3 2\n30 10 1 5\n20 10 4 6\n10 20 1 9\n")
    ref = prepare_dataset(plain, "snap", tmp_path / "ref", snapshots=3, weights="given")
    rows = [line.split() for line in plain.read_text().splitlines()]
    csv = "ts,from,note,to,amount\n" + "".join(f"{t},{s},n,{d},{w}\n" for s, d, w, t in rows)
    p = _write(tmp_path, "named.csv", csv)
    a = prepare_dataset(p, "snap", tmp_path / "a", snapshots=3, weights="given",
                        columns="src=from,dst=to,time=ts,weight=amount")
    b = prepare_dataset(p, "snap", tmp_path / "b", snapshots=3, weights="given", columns="src=1,dst=3,time=0,weight=4")
    ws = _write(tmp_path, "ws.txt", "".join(f"{t} {s} n {d} {w}\n" for s, d, w, t in rows))  # headerless, spaces
    c = prepare_dataset(ws, "snap", tmp_path / "c", snapshots=3, weights="given", columns="src=1,dst=3,time=0,weight=4")
    for m, root in ((a, "a"), (b, "b"), (c, "c")):
        assert m.snapshot_edges == ref.snapshot_edges and m.snapshot_time == ref.snapshot_time
        with ShardReader(tmp_path / root, m) as r, ShardReader(tmp_path / "ref", ref) as q:
            for t in range(3):
                assert r.read(t).weights.tolist() == q.read(t).weights.tolist()
    assert a.source["columns"] == {"src": "from", "dst": "to", "time": "ts", "weight": "amount"}
    with pytest.raises(DataError, match=r"named\.csv: --weights given needs weight=COLUMN in --columns"):
        prepare_dataset(p, "snap", tmp_path / "d", weights="given", columns="src=from,dst=to,time=ts")


@pytest.mark.parametrize(
    "fmt,spec,match",
    [
        ("jodie", "src=u,dst=i,time=nope", r"t\.csv:1: --columns time=nope: no such column; the header has 'u', 'i'"),
        ("jodie", "src=u,dst=i", r"t\.csv: --columns: missing key 'time'"),
        ("jodie", "src=u,dst=i,time=ts,src=u", r"t\.csv: --columns: key 'src' given twice"),
        ("jodie", "src=u,dst=u,time=ts", r"t\.csv:1: --columns: src and dst both map to column 0"),
        ("jodie", "src=u,dst=i,time=ts,weight=f0", r"t\.csv: --columns: unknown key 'weight' for --format jodie"),
        ("snap", "src=u,dst=i,time=ts,label=label", r"t\.csv: --columns: unknown key 'label' for --format snap"),
        ("jodie", "src=u,dst=i,time=9", r"t\.csv:1: --columns time=9: the header has 6 columns"),
        ("jodie", "src=u,dst=i,ts", r"t\.csv: --columns: 'ts' is not KEY=COLUMN"),
        ("pygt-json", "src=u,dst=i,time=ts", r"t\.csv: --columns applies only to --format snap or jodie"),
    ],
)
def test_bad_column_mappings_are_one_line_errors(tmp_path, fmt, spec, match):
    """Every bad --columns names the file and the key, on one line, and writes nothing."""
    p = _write(tmp_path, "t.csv", VARIANTS["tgl"])
    with pytest.raises(DataError, match=match) as e:
        prepare_dataset(p, fmt, tmp_path / "o", columns=spec)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("time", ["-1", "ts", "1.5"])
def test_a_name_for_a_headerless_snap_file_blames_its_own_key(tmp_path, time):
    """``--columns src=0,dst=1,time=-1`` on a SNAP file of numbers took line 1 ("1 2 1082040961") for a header,
    found dst=1 as the *name* of column 0, and said "src and dst both map to column 0" (and lost line 1): the
    error now names the key that is no index."""
    p = _write(tmp_path, "t.txt", "1 2 1082040961\n1 3 1082155839\n2 5 1082414391\n")
    with pytest.raises(DataError, match=rf"t\.txt:1: --columns time={time}: this file has no header line, so "
                                        "columns are 0-based indices"):
        prepare_dataset(p, "snap", tmp_path / "o", columns=f"src=0,dst=1,time={time}")
    assert not (tmp_path / "o").exists()


def test_cli_bad_columns_exit_2(tmp_path, capsys):
    """Through the CLI a bad mapping is 'hpcdgnn: error: ...' on one line and exit status 2."""
    p = _write(tmp_path, "t.csv", VARIANTS["tgl"])
    rc = main(["prepare", str(p), "--format", "jodie", "--output", str(tmp_path / "o"), "--columns", "src=u,dst=i"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == f"hpcdgnn: error: {p}: --columns: missing key 'time' (src, dst, time are required)"


# --------------------------------------------------------------------------- output size guard


def test_size_guard_refuses_huge_snapshot_count(tmp_path, capsys):
    """A tiny input with --snapshots 100000 is refused before writing, estimate first; --force is no bypass.

    --force only replaces an existing output; scripts pass it routinely, so it must not also lift the guard.
    """
    p = _write(tmp_path, "tiny.csv", VARIANTS["jodie"])
    out = tmp_path / "o"
    for force in (False, True):
        with pytest.raises(DataError) as e:
            prepare_dataset(p, "jodie", out, snapshots=100_000, force=force)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{p}: --snapshots 100000 would write about")
        assert "over the limit of 2 GiB" not in msg  # tiny N: it is the file count that is too large
        assert "12,502 files" in msg and "10,000 files" in msg and "pass --allow-large" in msg
        err = capsys.readouterr().err
        assert "estimated output: N=6 T=100000 F=2" in err
        assert not out.exists()


def test_size_guard_bytes_and_shard_size_trigger(tmp_path, capsys):
    """The byte limit names the slicing option; a file count caused by --shard-size names --shard-size."""
    path = SHARED / "soc-sign-bitcoinalpha.csv.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    with pytest.raises(DataError, match=r"--snapshots 100000 would write about 6\.\d+ GiB in 12,502 files, over the "
                                        r"limit of 2 GiB and 10,000 files"):
        prepare_dataset(path, "snap", tmp_path / "o", snapshots=100_000)
    tiny = _write(tmp_path, "tiny.csv", VARIANTS["jodie"])
    with pytest.raises(DataError, match=r"tiny\.csv: --shard-size 1 would write about .* in 12,002 files"):
        prepare_dataset(tiny, "jodie", tmp_path / "o", snapshots=12_000, shard_size=1)
    assert not (tmp_path / "o").exists()


def test_allow_large_lifts_the_guard(tmp_path, monkeypatch, capsys):
    """With the limit lowered below a small dataset, the default refuses and --allow-large writes it."""
    monkeypatch.setattr(prepare, "MAX_OUTPUT_BYTES", 1000)
    p = _write(tmp_path, "tiny.csv", VARIANTS["jodie"])
    with pytest.raises(DataError, match=r"the default --snapshots 32 would write about .* over the limit of 1000 B"):
        prepare_dataset(p, "jodie", tmp_path / "o")
    m = prepare_dataset(p, "jodie", tmp_path / "o", allow_large=True)
    assert m.num_snapshots == 32 and "allow_large" not in m.source["options"]


@pytest.mark.parametrize(
    "name,fmt,kw",
    [
        ("CollegeMsg.txt.gz", "snap", {"snapshots": 20}),
        ("CollegeMsg.txt.gz", "snap", {"snapshots": 8, "undirected": True, "edge_life": 3}),
        ("email-Eu-core-temporal.txt.gz", "snap", {"snapshots": 16, "mtransform": 4, "labels": "next_activity"}),
        ("chickenpox.json.gz", "pygt-json", {"labels": "target_bins"}),
        (None, "jodie", {"snapshots": 3, "labels": "state"}),
    ],
)
def test_estimate_within_2x_of_written_size(tmp_path, monkeypatch, name, fmt, kw):
    """The estimate printed by the guard is close to the bytes and files actually written (and counts exact)."""
    if name is None:
        path = _write(tmp_path, "w.csv", VARIANTS["tgl"])
    else:
        path = SHARED / name
        if not path.is_file():
            pytest.skip(f"{path} not present")
    seen = []
    real_estimate = prepare.estimate_output

    def spy(prepared, **options):
        seen.append((list(prepared.snapshot_edges), list(prepared.snapshot_nnz)))
        seen.append(real_estimate(prepared, **options))
        return seen[-1]

    monkeypatch.setattr(prepare, "estimate_output", spy)
    m = prepare_dataset(path, fmt, tmp_path / "d", **kw)
    (edges, nnz), est = seen
    assert (edges, nnz) == (m.snapshot_edges, m.snapshot_nnz)  # the edge part is counted, not guessed
    real = _size(tmp_path / "d")
    assert 0.5 * real <= est.bytes <= 2 * real, (est.bytes, real)
    assert est.files == sum(1 for f in (tmp_path / "d").rglob("*") if f.is_file())


def test_cli_size_guard_prints_estimate_then_one_line_error(tmp_path, capsys):
    """On the command line: the estimate line first, then 'hpcdgnn: error: ...' naming the option; exit 2."""
    p = _write(tmp_path, "tiny.csv", VARIANTS["tgl"])
    rc = main(["prepare", str(p), "--format", "jodie", "--output", str(tmp_path / "o"), "--snapshots", "100000",
               "--force"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 2
    assert err[0].startswith(f"hpcdgnn prepare: {p}: estimated output: N=6 T=100000 F=2:")
    assert err[1].startswith(f"hpcdgnn: error: {p}: --snapshots 100000 would write about")
    assert err[1].endswith("or pass --allow-large to write it anyway")
    assert not (tmp_path / "o").exists()
