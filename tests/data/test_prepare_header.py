"""A first line of numbers that is also what pandas writes as the header of unnamed columns (``0,1,2``:
``DataFrame.to_csv(index=False)``): both readers of each format read it as data, as the format's rules say, and
say so in one line naming the file and line, never adding that event silently."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpcdgnn.data.prepare import jodie, snap

ROWS = "5,6,10\n6,7,11\n7,5,12\n"


def _write(tmp_path: Path, text: str, name: str = "in.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _warning(path: Path, line: int, first: str) -> str:
    return (f"hpcdgnn prepare: warning: {path}:{line}: {first} is read as data, an event, though pandas writes it as "
            "the header of unnamed columns (DataFrame.to_csv): if it is one, remove that line")


def _snap_both(path: Path, columns, monkeypatch) -> list:
    """The edge list by each of snap's readers: numpy's (where it takes the file) and the line-by-line one."""
    fast = snap.parse_edge_list(path, columns)
    monkeypatch.setattr(snap, "_plain_columns", lambda text: None)
    return [fast, snap.parse_edge_list(path, columns)]


@pytest.mark.parametrize("columns", [None, {"src": "0", "dst": "1", "time": "2"}])
@pytest.mark.parametrize("first", ["0,1,2", '"0","1","2"', "0 1 2"])
def test_snap_reads_a_numbered_first_line_as_data_and_says_so(tmp_path, monkeypatch, capsys, first, columns):
    """``0,1,2`` above rows of numbers was read as the event 0 -> 1 at time 2, without a word, by numpy's reader and
    the line-by-line one (quoted, as pandas' QUOTE_ALL writes it, too), and with ``--columns`` by index."""
    path = _write(tmp_path, f"# a comment\n{first}\n{ROWS.replace(',', ' ') if ' ' in first else ROWS}")
    for edges in _snap_both(path, columns, monkeypatch):
        np.testing.assert_array_equal(np.sort(edges.time), [2, 10, 11, 12])
    assert capsys.readouterr().err.splitlines() == [_warning(path, 2, first.replace('"', "").replace(" ", ","))] * 2


@pytest.mark.parametrize("first", ["0,1,2", '"0","1","2"'])
def test_jodie_reads_a_numbered_first_line_by_index_as_data_and_says_so(tmp_path, monkeypatch, capsys, first):
    """--format jodie --columns by index: line 1 is data when its time is a number; ``0,1,2`` was read so without a
    word, by the numpy reader and the line-by-line one (quoted, or the numpy one declining)."""
    path = _write(tmp_path, f"{first}\n{ROWS}")
    columns = {"src": "0", "dst": "1", "time": "2"}
    times = [jodie._parse(path, columns, labels=False)[2]]
    monkeypatch.setattr(jodie, "_plain_table", lambda *args, **kwargs: None)
    times.append(jodie._parse(path, columns, labels=False)[2])
    for time in times:
        np.testing.assert_array_equal(np.sort(time), [2, 10, 11, 12])
    assert capsys.readouterr().err.splitlines() == [_warning(path, 1, "0,1,2")] * 2


@pytest.mark.parametrize("first", ["0,1,5", "1,2,3", "0,1,2,3,5"])
def test_another_first_line_of_numbers_is_data_without_a_word(tmp_path, monkeypatch, capsys, first):
    """Only the column numbers from 0 are what pandas writes; any other first line of numbers is a row like the
    others."""
    width = first.count(",") + 1
    path = _write(tmp_path, f"{first}\n" + "".join(f"{','.join(['7'] * (width - 1))},{t}\n" for t in (10, 11)))
    _snap_both(path, {"src": "0", "dst": "1", "time": str(width - 1)}, monkeypatch)
    jodie._parse(path, {"src": "0", "dst": "1", "time": str(width - 1)}, labels=False)
    assert capsys.readouterr().err == ""
