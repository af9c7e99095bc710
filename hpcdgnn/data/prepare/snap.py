"""SNAP-style timestamped edge lists -> snapshots (``hpcdgnn prepare --format snap``).

Input (SPEC "Raw inputs"): one event per line, ``src dst [weight] time``, whitespace
and/or commas, fields maybe quoted with ``"`` (:func:`~._common.quoted_fields`); ``#``/``%``
comment lines (SNAP, Network Repository ``.edges``) skipped; plain, gzip, xz or bz2.
``--columns`` reads any delimited file (docs/data.md). Ids are remapped to 0..N-1 in sorted
order (numeric when all are integers). Given weights must be non-negative: GCN's
``D^{-1/2} A D^{-1/2}`` needs non-negative degrees.

Time slicing, after a stable sort by time (``tmin``/``tmax`` the extreme times):

* ``--snapshots T`` (default 32): slice ``min(T - 1, floor((t - tmin) * T / (tmax - tmin)))``,
  in exact integer arithmetic for integer times; slice k covers
  ``[tmin + k*span/T, tmin + (k+1)*span/T)``, the last one closed. Empty slices are kept,
  so snapshot k always means the same time range.
* ``--window S``: slice ``floor((t - tmin) / S)``; at most 100,000 slices.
* ``--events-per-snapshot K``: consecutive groups of K events; time ``[first, last]``.
"""

from __future__ import annotations

import io
import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from hpcdgnn.data.prepare._common import (
    DEFAULT_SNAPSHOTS,
    REQUIRED_COLUMNS,
    LastLine,
    PreparedInput,
    PrepareOptions,
    RowWidths,
    Slice,
    _is_number,
    check_given_weights,
    check_header_width,
    check_not_json,
    check_separator,
    comma_separated,
    describe_header,
    guess_columns,
    last_breaks_order,
    looks_like_header,
    note_numbered_first_line,
    parse_columns,
    parse_numbers,
    quoted_fields,
    read_by_name,
    read_input_text,
    remap_ids,
    resolve_columns,
    shorten,
    slice_events,
    split_fields,
    stored_edges_per_slice,
)
from hpcdgnn.data.writer import RawSnapshot
from hpcdgnn.errors import DataError

__all__ = ["read_snap", "parse_edge_list", "EdgeList", "SNAP_COLUMN_KEYS", "snapshot_counts", "slicing_kwargs"]

#: ``--columns`` keys for ``--format snap`` (a state label means nothing without JODIE's users).
SNAP_COLUMN_KEYS = ("src", "dst", "time", "weight")


class EdgeList:
    """Parsed events, stably sorted by time, with vertices remapped to 0..N-1.

    Attributes:
        src, dst: (E,) int64 vertex indices.
        time: (E,) int64 when every timestamp is an integer, else float64.
        weight: (E,) float64 of the weight column, or None for 3 columns.
        vertex_ids: (N,) original ids; ``vertex_ids[i]`` is vertex i.
        inversions: adjacent rows of the file whose time decreases (0: time-ordered).
    """

    def __init__(
        self, src: np.ndarray, dst: np.ndarray, time: np.ndarray, weight: np.ndarray | None, vertex_ids: np.ndarray
    ) -> None:
        self.inversions = int(np.count_nonzero(time[1:] < time[:-1]))
        order = np.argsort(time, kind="stable")
        self.src, self.dst, self.time = src[order], dst[order], time[order]
        self.weight = None if weight is None else weight[order]
        self.vertex_ids = vertex_ids

    @property
    def num_vertices(self) -> int:
        """N, the number of distinct ids."""
        return int(self.vertex_ids.shape[0])


def _numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, stripped line)`` of every data line: blank and ``#``/``%`` comment lines skipped."""
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and s[0] not in "#%":
            yield lineno, s


def _matrix_market(path: Path, text: str, rows: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """``rows`` of a MatrixMarket file (Network Repository's ``.mtx``) without its size line ``M N NNZ``, the first
    after the comments, which would otherwise read as an event; ``rows`` unchanged for any other file.

    Raises:
        DataError: a dense ``array`` MatrixMarket file, which holds no edge list.
    """
    banner = text[:200].lstrip("\ufeff").lower()
    if not banner.startswith("%%matrixmarket"):
        return rows
    if "coordinate" not in banner.splitlines()[0]:
        raise DataError(f"{path}: a dense MatrixMarket array, not an edge list (MatrixMarket 'coordinate' rows "
                        "'src dst [weight] time' are read)")
    next(rows, None)
    return rows


#: ASCII line breaks of ``str.splitlines`` (the line-by-line reader's) that ``np.loadtxt`` reads as spaces
_OTHER_BREAKS = ("\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def _plain_columns(text: str) -> list[np.ndarray] | None:
    r"""The columns of a plain numeric edge list by numpy's C reader, or None where the line-by-line reader of
    :func:`parse_edge_list` must read it (and name the line of any error).

    Plain: ASCII, every line ending in a newline (``\n`` or ``\r\n``), ``#``/``%`` comments only in lines at the
    top, no quote, 3 or 4 numeric fields per row split by whitespace and/or commas, integer ids. A column is int64
    when every token is a decimal integer, else finite float64 — :func:`~._common.parse_numbers`' rule, so both
    readers give the same arrays (tests/data/test_prepare_plain.py); this one holds no Python object per token
    (perf/results/prepare-scale).

    Returns:
        [src, dst, (weight,) time] in file order, or None.
    """
    if not text or text[-1] != "\n" or '"' in text or not text.isascii():
        return None
    # a lone \r, \v, \f or \x1c-\x1e breaks a line for splitlines, not for loadtxt (\r\n is a break for both)
    if any(c in text for c in _OTHER_BREAKS) or ("\r" in text and text.count("\r") != text.count("\r\n")):
        return None
    last = max(text.rfind("#"), text.rfind("%"))
    start = 0
    if last >= 0:  # comment lines at the top only (SNAP's, Network Repository's); MatrixMarket's size line is not data
        start = text.find("\n", last) + 1
        if start > 1 << 20 or text[:200].lstrip().lower().startswith("%%matrixmarket"):
            return None
        if any(s.strip() and s.strip()[0] not in "#%" for s in text[:start].splitlines()):
            return None
    body = text[start:] if start else text
    if "," in body:
        body = body.replace(",", " ")  # as the line-by-line reader does: a comma is a space

    def read(dtype, usecols=None) -> np.ndarray | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data": the other reader says it in one line
            try:
                return np.loadtxt(io.StringIO(body), dtype=dtype, comments=None, ndmin=2, usecols=usecols)
            except ValueError:
                return None

    table = read(np.int64)
    if table is None:
        table = read(np.float64)  # rectangular and numeric, not all integers
        ids = None if table is None or table.shape[1] not in (3, 4) else read(np.int64, (0, 1))
        if ids is None:
            return None
        columns = [ids[:, 0], ids[:, 1], *(table[:, c] for c in range(2, table.shape[1]))]
        for c in range(2, table.shape[1]):
            whole = read(np.int64, (c,))
            if whole is not None:
                columns[c] = whole[:, 0]
            elif not np.isfinite(columns[c]).all():
                return None
        return columns
    if table.shape[0] == 0 or table.shape[1] not in (3, 4):
        return None
    return [np.ascontiguousarray(table[:, c]) for c in range(table.shape[1])]


def _from_columns(columns: list[np.ndarray]) -> EdgeList:
    """An :class:`EdgeList` from [src, dst, (weight,) time] ids and numbers in file order."""
    index, vertex_ids = remap_ids(np.concatenate(columns[:2]))
    e = columns[0].shape[0]
    weight = columns[2].astype(np.float64) if len(columns) == 4 else None
    return EdgeList(index[:e], index[e:], columns[-1], weight, vertex_ids)


def _fields(path: Path, row: tuple[int, str]) -> list[str]:
    """The fields of a ``(line number, line)`` row: comma-separated when it holds a comma outside quotes."""
    return split_fields(row[1], comma_separated(row[1]), path, row[0])


def _inline_comment(path: Path, lineno: int, fields: list[str]) -> DataError | None:
    """The error for a row that ends in a comment (``1 2 10 # note``), else None: read as fields, it is one of
    more columns than the rows above, or, on line 1, a header whose advice (``--columns``) cannot read it."""
    # past src and dst: an id may start with '#' (a hashtag graph's), a weight or time never does
    at = next((i for i, f in enumerate(fields) if i >= 2 and f[:1] in "#%"), None)
    if at is None:
        return None
    return DataError(f"{path}:{lineno}: {shorten(' '.join(fields[at:]))!r} after the data is a comment, which "
                     "--format snap reads only as a whole line ('#' or '%' first): remove it, e.g. "
                     f"sed 's/[[:space:]]*{fields[at][0]}.*//' IN > OUT")


def _header_error(path: Path, lineno: int, header: list[str]) -> DataError:
    """A header line in a SNAP file: name it, and say how to map it with ``--columns`` (a row ending in a comment
    is named so instead)."""
    comment = _inline_comment(path, lineno, header)
    if comment is not None:
        return comment
    guess = guess_columns(header, ("src", "dst", "time", "weight"))
    if all(k in guess for k in REQUIRED_COLUMNS):
        mapping = ",".join(f"{k}={header[i].strip()}" for k, i in guess.items())
    else:
        mapping = "src=NAME,dst=NAME,time=NAME[,weight=NAME]"
    jodie = ""
    if "label" in guess_columns(header, ("label",)):
        jodie = " (or --format jodie, which reads JODIE/TGL interaction headers)"
    return DataError(
        f"{path}:{lineno}: found a header line ({describe_header(header)}), but --format snap reads headerless"
        f" 'src dst [weight] time' rows; map the columns with --columns {mapping}{jodie}"
    )


def parse_edge_list(path: Path, columns: dict[str, str] | None = None) -> EdgeList:
    """Parse a SNAP edge list (positional ``src dst [weight] time``, or ``columns``).

    Raises:
        DataError: ``path:line: problem`` for the first bad line, no events, a header line
            without ``--columns``, or a ``--columns`` value that names no column.
    """
    text = read_input_text(path)
    check_not_json(path, text[:64].encode(), "snap")
    plain = _plain_columns(text) if columns is None else None
    if plain is not None:
        row = next(_numbered_lines(text), None)
        if row is not None:
            note_numbered_first_line(path, row[0], _fields(path, row))
        return _from_columns(plain)
    rows = _matrix_market(path, text, _numbered_lines(text))
    head = list(itertools.islice(rows, 2))
    if not head:
        raise DataError(f"{path}: no events (empty file or only comments)")
    first, second = _fields(path, head[0]), (_fields(path, head[1]) if len(head) > 1 else None)
    if columns is not None:
        return _parse_mapped(path, columns, head, rows, text)
    # a header's last field is a name where the data has a time: say so, not "cannot parse time"
    # (a file of a header line alone, too: one line without a number)
    if looks_like_header(first[-1:], second[-1:]) if second is not None else not any(map(_is_number, first)):
        raise _header_error(path, head[0][0], first)
    note_numbered_first_line(path, head[0][0], first)
    cols: list[list[str]] | None = None
    lines: list[int] = []
    first_line = 0
    quoted = '"' in text  # a file without a quote: str.split, with no check per line
    watch = LastLine(path, text, itertools.chain(head, rows))
    del text
    for lineno, s in watch:
        parts = quoted_fields(s, ", ", path, lineno) if quoted and '"' in s else s.replace(",", " ").split()
        if cols is None:
            check_separator(path, lineno, parts, "snap", "fields separated by whitespace or commas")
            if len(parts) not in (3, 4):
                if second is not None and looks_like_header(first, second):
                    raise _header_error(path, lineno, first)
                raise _inline_comment(path, lineno, parts) or DataError(
                    f"{path}:{lineno}: expected 3 or 4 columns (src dst [weight] time), got {len(parts)}")
            cols = [[] for _ in parts]
            first_line = lineno
        elif len(parts) != len(cols):
            raise _inline_comment(path, lineno, parts) or DataError(
                f"{path}:{lineno}: expected {len(cols)} columns like line {first_line}, got {len(parts)}")
        for c, p in zip(cols, parts, strict=True):
            c.append(p)
        lines.append(lineno)
    time = parse_numbers(cols[-1], lines, path, "time")
    watch.check(last_breaks_order(time))
    weight = parse_numbers(cols[2], lines, path, "weight").astype(np.float64) if len(cols) == 4 else None
    index, vertex_ids = remap_ids(cols[0] + cols[1])
    e = len(lines)
    return EdgeList(index[:e], index[e:], time, weight, vertex_ids)


def _parse_mapped(
    path: Path, columns: dict[str, str], head: list[tuple[int, str]], rows: Iterator[tuple[int, str]], text: str
) -> EdgeList:
    """``--columns``: any delimited file (comma when line 1 has one outside its quoted fields, else whitespace).

    Line 1 is a header when a mapped value is a name, or its time field is not a number while line 2's is.
    """
    comma = comma_separated(head[0][1])
    first = split_fields(head[0][1], comma, path, head[0][0])
    check_separator(path, head[0][0], first, "snap", "fields separated by whitespace or commas")
    second = split_fields(head[1][1], comma, path, head[1][0]) if len(head) > 1 else None
    by_name = read_by_name(columns)
    header = None
    if by_name:
        # a line of numbers is data: a value that is no index (time=-1, time=ts) then has no header to name, and
        # one that looked a number up among them blamed other keys ("src and dst both map to column 0")
        header = None if all(map(_is_number, first)) else first
    elif columns["time"].isdigit() and second is not None:
        t = int(columns["time"])
        if t < len(first) and t < len(second) and looks_like_header([first[t]], [second[t]]):
            header = first
    index = resolve_columns(columns, header, path, head[0][0])
    if header is None:
        note_numbered_first_line(path, head[0][0], first)
    keys = [k for k in ("src", "dst", "time", "weight") if k in index]
    need = max(index.values()) + 1
    want = ",".join(f"{k}={columns[k]}" for k in keys)
    data: dict[str, list[str]] = {k: [] for k in keys}
    lines: list[int] = []
    it = itertools.chain(head, rows)
    if header is not None:
        next(it)
    watch = LastLine(path, text, it)
    del text
    # read by index, a row of another width would read a weight as the time
    widths = RowWidths(path, (lambda ln, w: check_header_width(path, header, ln, w)) if by_name else None, "columns")
    for lineno, s in watch:
        parts = split_fields(s, comma, path, lineno)
        if len(parts) < need:
            raise DataError(f"{path}:{lineno}: expected at least {need} columns for --columns {want}, got {len(parts)}")
        widths.see(lineno, len(parts))
        for k in keys:
            data[k].append(parts[index[k]])
        lines.append(lineno)
    if not lines:
        raise DataError(f"{path}: no events (header only)")
    time = parse_numbers(data["time"], lines, path, f"time (column {columns['time']})")
    watch.check(index["time"] == widths.width - 1 and last_breaks_order(time))
    weight = None
    if "weight" in data:
        weight = parse_numbers(data["weight"], lines, path, f"weight (column {columns['weight']})").astype(np.float64)
    idx, vertex_ids = remap_ids(data["src"] + data["dst"])
    e = len(lines)
    return EdgeList(idx[:e], idx[e:], time, weight, vertex_ids)


def _snapshots(edges: EdgeList, slices: list[Slice]) -> Iterator[RawSnapshot]:
    for s in slices:
        w = None if edges.weight is None else edges.weight[s.lo : s.hi]
        yield RawSnapshot(src=edges.src[s.lo : s.hi], dst=edges.dst[s.lo : s.hi], weight=w, time=s.time)


def read_snap(path: Path, opts: PrepareOptions) -> PreparedInput:
    """Read a SNAP edge list and slice it into snapshots (rules in the module docstring).

    Raises:
        DataError: bad input, or ``--weights given`` without a usable weight column.
    """
    columns = None if opts.columns is None else parse_columns(opts.columns, path, SNAP_COLUMN_KEYS, "snap")
    edges = parse_edge_list(path, columns)
    if opts.weights == "given":
        if edges.weight is None:
            if columns is not None:
                raise DataError(f"{path}: --weights given needs weight=COLUMN in --columns")
            raise DataError(f"{path}: --weights given needs a weight column (src dst weight time); this file has 3")
        check_given_weights(path, [edges.weight])
    slices = slice_events(edges.time, path, **slicing_kwargs(opts))
    source = {"events": int(edges.src.shape[0]), "time_min": float(edges.time[0]), "time_max": float(edges.time[-1])}
    if columns is not None:
        source["columns"] = columns
    return PreparedInput(
        num_vertices=edges.num_vertices,
        snapshots=_snapshots(edges, slices),
        vertex_ids=edges.vertex_ids,
        has_weights=edges.weight is not None,
        source=source,
        **snapshot_counts(edges.src, edges.dst, edges.num_vertices, slices, opts),
    )


def snapshot_counts(
    src: np.ndarray, dst: np.ndarray, n: int, slices: list[Slice], opts: PrepareOptions
) -> dict[str, list[int]]:
    """``snapshot_edges`` / ``snapshot_nnz`` of :class:`PreparedInput` (exact, for the size estimate)."""
    window = max(opts.edge_life, opts.mtransform)
    edges, nnz = stored_edges_per_slice(src, dst, n, slices, opts.undirected, window)
    return {"snapshot_edges": edges, "snapshot_nnz": nnz}


def slicing_kwargs(opts: PrepareOptions) -> dict[str, float | int | None]:
    """The slicing options of ``opts``, defaulting to ``snapshots = 32`` when none is given."""
    kw = {"snapshots": opts.snapshots, "window": opts.window, "events_per_snapshot": opts.events_per_snapshot}
    if all(v is None for v in kw.values()):
        kw["snapshots"] = DEFAULT_SNAPSHOTS
    return kw
