"""``prepare``'s two readers of a SNAP edge list: numpy's C reader for plain numeric files and the line-by-line one
for the rest (``hpcdgnn/data/prepare/snap.py``) give the same events, ids and dtypes; a file the fast reader does not
take still gets the line-by-line reader's one-line errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from hpcdgnn.data.prepare import snap
from hpcdgnn.errors import DataError


def _both(path, monkeypatch):
    """(the edge list as parse_edge_list reads it, as the line-by-line reader alone reads it, fast reader taken)."""
    taken = []
    real = snap._plain_columns

    def spy(text):
        out = real(text)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(snap, "_plain_columns", spy)
    fast = snap.parse_edge_list(path)
    monkeypatch.setattr(snap, "_plain_columns", lambda text: None)
    slow = snap.parse_edge_list(path)
    return fast, slow, taken[0]


def _same(a, b) -> None:
    for name in ("src", "dst", "time", "weight", "vertex_ids"):
        x, y = getattr(a, name), getattr(b, name)
        if y is None:
            assert x is None, name
            continue
        assert x.dtype == y.dtype, (name, x.dtype, y.dtype)
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert a.inversions == b.inversions


def _random_rows(rng, n: int, weight: str | None, time: str) -> list[list[str]]:
    ids = rng.integers(-5, 10**12, size=40)
    rows = []
    for _ in range(n):
        t = (str(int(rng.integers(0, 10**15))) if time == "int" else
             repr(float(rng.uniform(-1e6, 1e9))) if time == "float" else f"{rng.uniform(0, 100):.17e}")
        row = [str(ids[rng.integers(40)]), str(ids[rng.integers(40)])]
        if weight == "int":
            row.append(str(int(rng.integers(-10, 10))))
        elif weight == "float":
            row.append(f"{rng.uniform(0, 5):.6f}")
        rows.append([*row, t])
    return rows


@pytest.mark.parametrize("weight", [None, "int", "float"])
@pytest.mark.parametrize("time", ["int", "float", "exp"])
@pytest.mark.parametrize("sep", [" ", "\t", ",", ", ", "  \t"])
def test_plain_files_read_the_same_by_both_readers(tmp_path, monkeypatch, weight, time, sep):
    rng = np.random.default_rng([len(sep), [None, "int", "float"].index(weight), len(time)])
    rows = _random_rows(rng, 300, weight, time)
    text = "# Directed graph\n% a comment\n\n" + "".join(sep.join(r) + "\n" for r in rows)
    path = tmp_path / "edges.txt"
    path.write_text(text)
    fast, slow, taken = _both(path, monkeypatch)
    assert taken
    _same(fast, slow)


def test_compressed_crlf_signed_and_padded_tokens(tmp_path, monkeypatch):
    text = "# c\r\n+3 007 5\r\n  -2\t3 4 \r\n\r\n3 -2 1\r\n"
    path = tmp_path / "edges.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    fast, slow, taken = _both(path, monkeypatch)
    assert taken
    _same(fast, slow)
    np.testing.assert_array_equal(fast.vertex_ids, [-2, 3, 7])


@pytest.mark.parametrize("text", [
    "1 2 3\n4 5 6",  # no newline at the end: the cut-line check reads it row by row
    '1 2 3\n"4" 5 6\n',  # quoted field
    "1 2 3\n# a comment between rows\n4 5 6\n",
    "1 2 3 # a trailing note\n4 5 6\n",
    "1 2 3\r4 5 6\r",  # old Mac line ends
    "1 2\x0c3\n4 5 6\n",  # a form feed breaks the line for splitlines, is a space for loadtxt
    "a b 3\nc d 4\n",  # string ids
    "1.5 2 3\n4 5 6\n",  # a float id: read as text by the other reader
    "99999999999999999999 2 3\n4 5 6\n",  # an id past int64
    "%%MatrixMarket matrix coordinate integer general\n3 3 2\n1 2 5\n2 3 6\n",
    "1 2 3\n\u00e92 5 6\n",  # not ASCII
])
def test_other_files_go_to_the_line_reader(tmp_path, monkeypatch, text):
    path = tmp_path / "edges.txt"
    path.write_text(text)
    assert snap._plain_columns(text) is None
    try:
        fast = snap.parse_edge_list(path)
    except DataError as e:
        monkeypatch.setattr(snap, "_plain_columns", lambda text: None)
        with pytest.raises(DataError) as slow:
            snap.parse_edge_list(path)
        assert str(e) == str(slow.value)
        return
    monkeypatch.setattr(snap, "_plain_columns", lambda text: None)
    _same(fast, snap.parse_edge_list(path))


@pytest.mark.parametrize("text, error", [
    ("1 2 3\n4 5\n", ":2: expected 3 columns like line 1, got 2"),
    ("1 2\n3 4\n", ":1: expected 3 or 4 columns"),
    ("1 2 3 4 5\n", ":1: expected 3 or 4 columns"),
    ("1 2 3\n4 5 nan\n", ":2: time 'nan' is not a finite number"),
    ("1 2 3\n4 5 1e400\n", ":2: time '1e400' is not a finite number"),
    ("1 2 3\n4 5 x\n", ":2: cannot parse time 'x'"),
    ("# only comments\n", "no events"),
])
def test_bad_plain_files_get_the_line_readers_error(tmp_path, text, error):
    """A file that looks plain but is not valid goes to the line-by-line reader, whose error names the line."""
    path = tmp_path / "edges.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=error.replace("(", r"\(").replace(")", r"\)")):
        snap.parse_edge_list(path)
