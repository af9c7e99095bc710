"""``predict --pairs FILE``: a header line of column names (pandas' ``u,v,t``, predict's own ``u,v,t,score``) is
read as such, a CSV line's fields as CSV (an empty field is a column), and a line that is not numbers, or a row out
of range, is named by its line counted from 1 and its column by its position."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from hpcdgnn.embed import _checked_pairs, _read_pairs, pairs_of
from hpcdgnn.errors import DataError
from tests.metrics.test_embed import _cli, _train


@pytest.mark.parametrize(("text", "rows"), [
    ("u,v,t\n0,1,5\n3,9,2\n", [[0, 1, 5], [3, 9, 2]]),  # pandas' to_csv(index=False)
    ("u,v,t,score\n0,1,5,0.5\n3,9,2,0.25\n", [[0, 1, 5], [3, 9, 2]]),  # predict's own output
    ("t v u\n5 1 0\n", [[0, 1, 5]]),  # named: read by name
    ("src,dst,time\n0,1,5\n", [[0, 1, 5]]),  # three other names: in order
    ("# pairs\n\nu,v,t\n0,1,5\n", [[0, 1, 5]]),
    ("\ufeffu,v,t,score\n0,1,5,0.5\n", [[0, 1, 5]]),  # Excel's CSV: a byte-order mark first
    (",u,v,t\n0,3,5,1.0\n1,4,6,2.0\n", [[3, 5, 1], [4, 6, 2]]),  # pandas' to_csv(path): its index column first
    ('"u","v","t"\n"0","1","5"\n', [[0, 1, 5]]),  # pandas' quoting=csv.QUOTE_ALL
    ("0,1,5\n3 9 2\n", [[0, 1, 5], [3, 9, 2]]),  # commas on one line, blanks on the next
])
def test_a_header_line_of_names_is_skipped(tmp_path, text, rows):
    path = tmp_path / "pairs.csv"
    path.write_text(text)
    assert _read_pairs(str(path))[0].tolist() == rows


@pytest.mark.parametrize(("text", "said"), [
    ("0,1,5\n0,x,5\n", "line 2, column 2: 'x' is not a number"),
    ("# c\nu,v,t,score\n0,1,5\n",
     "line 2, column 1: 'u' is not a number; a header line names every column, one name each"),
    ("0,1,5\n0,1\n", "line 2 has 2 columns, the lines before it 3"),
    ("u,1,5\n", "line 1, column 1: 'u' is not a number"),
    # ids that are names throughout: the first line read as a header, the second is no header to point at
    ("a,b,c\nd,e,f\n", "line 2, column 1: 'd' is not a number"),
])
def test_a_line_that_is_not_numbers_is_named_from_1(tmp_path, text, said):
    path = tmp_path / "pairs.csv"
    path.write_text(text)
    with pytest.raises(DataError) as e:
        _read_pairs(str(path))
    assert str(e.value) == f"--pairs {path}: {said}"


_PANDAS = ("it looks like pandas' index column (to_csv writes it unless told not to): write the file with "
           "to_csv(path, index=False), or name the columns u, v, t in the header")


@pytest.mark.parametrize(("text", "said"), [
    ("0,,5\n", "line 1, column 2 is empty"),
    ("0,1,5\n,1,x\n", "line 2, column 1 is empty"),
    ("0,1,5\n0,1 2,5\n", "line 2, column 2: '1 2' is not a number"),
    # pandas' to_csv(path) of columns it cannot read by name: in order its index would be read as u
    (",src,dst,time\n0,3,5,1\n", f"line 1, column 1 of the header line has no name; {_PANDAS}"),
    (",0,1,2\n0,3,5,1\n", f"line 1, column 1 is empty; {_PANDAS}"),  # pd.DataFrame(array).to_csv(path)
    # read by name, a row of another width would take its neighbour's column
    ("u,v,t\n0,1,5\n9,0,1,5\n", "line 3 has 4 columns, the lines before it 3"),
])
def test_csv_fields_are_named_by_their_column(tmp_path, text, said):
    """Commas were replaced by blanks before splitting, so an empty CSV field vanished and the fields after it were
    named one column early: pandas' default to_csv (header ``,u,v,t``) was refused as "line 1, column 1: 'u' is not
    a number", 'u' being column 2 and the cause, pandas' unnamed index column, unsaid. A CSV line is split as CSV:
    an empty field is a column, named by its position."""
    path = tmp_path / "pairs.csv"
    path.write_text(text)
    with pytest.raises(DataError) as e:
        _read_pairs(str(path))
    assert str(e.value) == f"--pairs {path}: {said}"


@pytest.mark.parametrize(("text", "said"), [
    ("# pairs\nu,v,t\n0,1,5\n\n0,99,5\n", "line 5: v = 99 is outside 0 .. 22"),
    ("u,v,t,score\n0,1,5,0.5\n# kept\n3,9,2.5,0.25\n", "line 4: u, v, t must be integers"),
    ("t v u\n9 1 0\n", "line 2: t = 9 is outside 0 .. 6"),
    ("0 1 5\n0 1 7\n", "line 2: t = 7 is outside 0 .. 6"),
])
def test_a_bad_row_of_a_file_is_named_by_its_line(tmp_path, text, said):
    """A row out of range was named "row N" counting data rows from 0, while a line that is not numbers is named
    by its line from 1: with a header or comments the two numbers named different lines. A file's row is its
    line; a .npy's its index, said to count from 0; in-memory rows (the Python API's) keep their index."""
    path = tmp_path / "pairs.csv"
    path.write_text(text)
    with pytest.raises(DataError) as e:
        _checked(path)
    assert str(e.value) == f"--pairs {path}: {said}"
    np.save(tmp_path / "p.npy", np.array([[0, 1, 5], [0, 99, 5]]))
    with pytest.raises(DataError, match=r"^--pairs \S+p\.npy: row 1 \(from 0\): v = 99 is outside 0 \.\. 22$"):
        _checked(tmp_path / "p.npy")
    with pytest.raises(DataError, match=r"^pairs: row 1: v = 99 is outside 0 \.\. 22$"):
        _checked_pairs(pairs_of([[0, 1, 5], [0, 99, 5]]), "pairs", 23, 7)


def _checked(path):
    """``predict --pairs PATH``'s reading and check, for a dataset of 23 vertices and 7 steps."""
    rows, lines = _read_pairs(str(path))
    return _checked_pairs(rows, f"--pairs {path}", 23, 7, lines)


def test_predict_s_output_scores_again(tmp_path, small_dataset):
    """A pairs file with pandas' header, then predict's own output given back as --pairs: the same scores."""
    run = _train(tmp_path, small_dataset, "full")
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("u,v,t\n0,1,5\n3,9,2\n22,0,5\n")
    indexed = tmp_path / "indexed.csv"  # pandas' df.to_csv(path): an unnamed index column first
    indexed.write_text(",u,v,t\n0,0,1,5\n1,3,9,2\n2,22,0,5\n")
    outs = ("first.csv", "again.csv", "indexed-out.csv")
    for given, out in zip((pairs, tmp_path / "first.csv", indexed), outs, strict=True):
        proc = _cli(tmp_path, "predict", run, "--pairs", given, "--output", tmp_path / out)
        assert proc.returncode == 0, proc.stderr
    first, again, by_index = ([dict(r) for r in csv.DictReader(open(tmp_path / name))] for name in outs)
    assert first == again == by_index and [r["u"] for r in first] == ["0", "3", "22"]


def test_the_help_and_results_doc_say_a_header_is_read_and_predict_s_output_given_back():
    """``--pairs``' help and docs/results.md described a file of three integer columns only, though a header line
    of names is read and predict's own ``u,v,t,score`` output can be given back."""
    import argparse

    from hpcdgnn.embed import add_predict_arguments
    from tests.conftest import REPO

    parser = argparse.ArgumentParser()
    add_predict_arguments(parser)
    helped = " ".join(next(a.help for a in parser._actions if a.dest == "pairs").split())
    assert "column names is a header: u, v, t are read by name" in helped, helped
    assert "u,v,t,score output or a pandas to_csv (index column first) can be given back" in helped, helped
    doc = " ".join((REPO / "docs" / "results.md").read_text().split())
    assert "is read as a header" in doc and "`u,v,t,score` output can be given back as `--pairs`" in doc
