"""JODIE interaction CSVs -> bipartite snapshots (``hpcdgnn prepare --format jodie``).

Input (SPEC "Raw inputs"; JODIE, Kumar et al. 2019): a header, then comma-separated
interactions (fields, the header's too, maybe quoted with ``"``: :func:`~._common.quoted_fields`).
Recognised headers: JODIE's ``user_id,item_id,timestamp,state_label,...`` (first four
columns), TGL's ``u,i,ts,label,...`` and ``ml_*.csv`` (``,u,i,ts,label,idx``),
or one column per role named by :data:`~._common.COLUMN_ALIASES`; anything else needs
``--columns`` (a whitespace-separated edge list, which no mapping reads, is pointed to ``--format snap``).
Users and items are distinct vertices (users first; ``vertices.h5`` holds ``"u:<id>"``/``"i:<id>"``), edges go
user -> item. Slicing is :mod:`.snap`'s.

Snapshots ignore the edge features (they carry vertex features only, IBM §6.1);
``--labels state`` labels user u at t with the max ``state_label`` of its interactions
in t (-1 for none, items always -1). ``--kind events`` (:func:`parse_jodie_events`)
keeps every unmapped column that is not unnamed, ``idx``, label-like or TGL's split
(``int_roll``, ``ext_roll``) as a float
edge feature, named from the header when it has one name per field, else ``feat_k``
(JODIE's header ends with one name for all features).

A plain file (:func:`~._common.plain_text`: ASCII, no quote, newline-terminated lines) whose rows hold the same
number of fields, integer ids and finite numbers is read in blocks of lines (:func:`_plain_table`; an uncompressed
file from disk, a block at a time: :class:`~._common.InputBytes`) by arithmetic on the bytes where they are plain
decimals (:func:`~._common.decimal_fields`), else by numpy's C reader; any other file, and every error, by the
line-by-line reader, which names the line. All give the same arrays (tests/data/test_prepare_jodie_plain.py).
"""

from __future__ import annotations

import io
import itertools
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcdgnn.data.prepare._common import (
    BOM,
    COLUMN_ALIASES,
    InputBytes,
    LastLine,
    PreparedInput,
    PrepareOptions,
    RowWidths,
    Scratch,
    Slice,
    _is_number,
    check_header_width,
    check_not_json,
    check_separator,
    decimal_fields,
    decode_input,
    describe_header,
    guess_columns,
    last_breaks_order,
    leading_fields,
    looks_like_header,
    note_numbered_first_line,
    parse_columns,
    parse_numbers,
    plain_text,
    quoted_fields,
    read_by_name,
    remap_ids,
    resolve_columns,
    shorten,
    slice_events,
    split_fields,
)
from hpcdgnn.data.prepare.snap import slicing_kwargs, snapshot_counts
from hpcdgnn.data.writer import RawSnapshot, as_float32
from hpcdgnn.errors import DataError

__all__ = ["read_jodie", "parse_jodie_events", "JODIE_COLUMN_KEYS"]


#: ``--columns`` keys for ``--format jodie`` (no weight: JODIE interactions are unweighted).
JODIE_COLUMN_KEYS = ("src", "dst", "time", "label")

#: The original JODIE header, as the first four columns are named in messages.
_LEGACY = ("user", "item", "timestamp", "state_label")

#: TGL's ``edges.csv`` (``,src,dst,time,int_roll,ext_roll``): each event's split (0 train, 1 val, 2 test), not a
#: feature of it; as one, it would tell the model which events are the ones it is tested on.
_SPLIT_COLUMNS = ("int_roll", "ext_roll")

#: Header names (lower case) of columns that ``--kind events`` does not keep as edge features: an unnamed column
#: (TGL's ``ml_*.csv`` row index), ``idx``, a label, or TGL's split.
_NOT_FEATURES = frozenset({"", "idx", *COLUMN_ALIASES["label"], *_SPLIT_COLUMNS})


def _unrecognised(path: Path, lineno: int, header: list[str], why: str = "") -> DataError:
    want = "'user_id,item_id,timestamp,state_label,...' (JODIE) or 'u,i,ts,label,...' (TGL)"
    return DataError(
        f"{path}:{lineno}: expected the JODIE header {want}, got {describe_header(header)}{why};"
        " map the columns with --columns src=NAME,dst=NAME,time=NAME[,label=NAME]"
    )


def _check_not_whitespace(path: Path, first: tuple[int, str], second: tuple[int, str] | None,
                          header: list[str]) -> None:
    """Refuse a whitespace-separated edge list (SNAP's ``src dst time``), whose lines read as one comma-separated
    field: the advice for an unknown header, ``--columns``, cannot map one column, while ``--format snap`` reads
    such a file as it is.

    Args:
        path: the input, as messages name it.
        first: the first non-blank line (line number, stripped text).
        second: the next one, or None.
        header: ``first`` split on commas.

    Raises:
        DataError: the first line, or the second after a header, splits on whitespace into three or more numbers.
    """
    if len(header) != 1:
        return
    for lineno, line in [first] + ([second] if second is not None else []):
        fields = split_fields(line, False, path, lineno)
        if len(fields) >= 3 and all(map(_is_number, fields)):
            # with 4 columns snap reads the third as a weight and the fourth as the time: right for an edge list,
            # silently wrong for a whitespace JODIE export (user item time label), which the line must not invite
            order = ("" if len(fields) == 3 else "; snap reads 4 columns as src dst weight time: a file of user item "
                     "time label (JODIE's) must be made comma-separated with a header for --format jodie instead")
            raise DataError(
                f"{path}:{lineno}: fields separated by whitespace ({describe_header(fields)}): an edge list, which "
                "--format jodie (comma-separated, with a header) does not read; read it with --format snap "
                f"(src dst [weight] time, separated by whitespace or commas){order}"
            )


def _header_columns(
    path: Path, first: tuple[int, str], second: tuple[int, str] | None, columns: dict[str, str] | None
) -> tuple[dict[str, int], dict[str, str], list[str] | None]:
    """Column index of each role, the names used (for messages and provenance), and the fields of the first
    ``(line number, line)`` when it is a header, else None."""
    lineno = first[0]
    header = split_fields(first[1], True, path, lineno)
    check_separator(path, lineno, header, "jodie", "comma-separated fields")
    _check_not_whitespace(path, first, second, header)
    if columns is not None:
        by_name = any(not v.isdigit() for v in columns.values())
        has_header = True
        if not by_name and second is not None:
            t, data = int(columns["time"]), split_fields(second[1], True, path, second[0])
            # indices only: line 1 is data when its time field is a number like line 2's
            has_header = not (t < len(header) and t < len(data)) or looks_like_header([header[t]], [data[t]])
        index = resolve_columns(columns, header if has_header else None, path, lineno)
        return index, dict(columns), header if has_header else None
    head = [h.strip().lower() for h in header]
    if len(head) >= 4 and "user" in head[0] and "item" in head[1]:
        index = dict(zip(("src", "dst", "time", "label"), range(4), strict=True))
        return index, dict(zip(index, _LEGACY, strict=True)), header
    guess = guess_columns(header, JODIE_COLUMN_KEYS)
    missing = [k for k in ("src", "dst", "time") if k not in guess]
    if missing and len(header) >= 3 and all(map(_is_number, header)):  # no header: names would not help
        raise DataError(
            f"{path}:{lineno}: no header line (this line is data: {describe_header(header)}), and --format jodie"
            " finds the columns by the header's names; map them by 0-based index, e.g. --columns"
            " src=0,dst=1,time=2[,label=3]"
        )
    if missing:
        raise _unrecognised(path, lineno, header, f" (no unique column for {', '.join(missing)})")
    return guess, {k: header[i].strip() for k, i in guess.items()}, header


def _what(key: str, names: dict[str, str]) -> str:
    """How messages call a column: its header name, or ``time (column 2)`` when mapped by index."""
    name = names.get(key, "state_label")
    if name in _LEGACY:
        return name  # JODIE's own header names
    return f"{key} (column {name})" if name.isdigit() else f"{key} column {name!r}"


def check_width(path: Path, header: list[str] | None, lineno: int, width: int) -> None:
    """:func:`~._common.check_header_width`, but JODIE's own header (``user_id,item_id,timestamp,state_label,
    comma_separated_list_of_features``: at most one name after the four roles, for all the features) names no
    features one by one and is exempt; with more names it does."""
    head = [h.strip().lower() for h in header or ()]
    if len(_LEGACY) <= len(head) <= len(_LEGACY) + 1 and "user" in head[0] and "item" in head[1]:
        return
    check_header_width(path, header, lineno, width)


def _feature_columns(header: list[str] | None, width: int, mapped: set[int]) -> tuple[list[int], list[str]]:
    """The edge-feature columns of rows of ``width`` fields (rules in the module docstring) and their names."""
    named = header if header is not None else []
    fcols = [j for j in range(width) if j not in mapped and not (j < len(named) and named[j].lower() in _NOT_FEATURES)]
    if header is not None and len(header) == width:
        return fcols, [header[j] for j in fcols]
    return fcols, [f"feat_{k}" for k in range(len(fcols))]


def _need(index: dict[str, int], label: bool) -> int:
    """Fields a row must hold: up to the last mapped column (the label's only when ``label``: a label column that
    is not used is not required)."""
    return max(v for k, v in index.items() if k != "label" or label) + 1


@dataclass
class _Table:
    """A JODIE csv read by :func:`_plain_table`: what the line-by-line readers return, ids as int64."""

    users: np.ndarray
    items: np.ndarray
    time: np.ndarray
    state: np.ndarray | None
    features: np.ndarray | None
    feature_names: list[str]
    names: dict[str, str]


def _head(data: bytes, pos: int) -> tuple[list[tuple[int, str]], int, int]:
    r"""The first two non-blank lines among the ``\n``-ended lines of ``data`` (from byte ``pos`` on; a line cut at
    its end is not read) as ``(line number, stripped line)``, where the first begins and where the line after it
    begins."""
    head: list[tuple[int, str]] = []
    lineno = first = after = 0
    while len(head) < 2 and (end := data.find(b"\n", pos) + 1):
        lineno += 1
        if s := data[pos:end].decode("latin-1").strip():
            if not head:
                first, after = pos, end
            head.append((lineno, s))
        pos = end
    return head, first, after


#: Bytes of text read at once (a block of lines), with edge features: :func:`~._common.decimal_fields`' arrays of
#: one number per byte (some 30 bytes per byte of text) then stay in the processor's cache; without, it reads a
#: line's leading fields only, and larger blocks spare numpy calls.
_BLOCK = 1 << 17
_LEADING_BLOCK = 1 << 20
#: Blocks a line may span: a longer one (its block's arrays some 30 bytes per byte with edge features, 5 without)
#: goes to the line-by-line reader, whose memory is its tokens'
_LINE_BLOCKS = 8


def _load(block: bytes, fields: list[tuple[int, type]], fcols: list[int]) -> np.ndarray | None:
    """Columns ``fields`` (index, int64 or float64) and the float64 features ``fcols`` of a block of plain lines by
    ``np.loadtxt``, as a record array (fields ``c0, c1, ...`` and ``f``, shape (rows, D)), or None where it fails
    (a token that is not a number of that type, a row too short)."""
    dtype = [(f"c{j}", t) for j, (_, t) in enumerate(fields)] + ([("f", np.float64, (len(fcols),))] if fcols else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "input contained no data": a block of blank lines
        try:
            return np.loadtxt(io.StringIO(block.decode("ascii")), dtype=dtype, delimiter=",", comments=None,
                              usecols=[c for c, _ in fields] + fcols, ndmin=1)
        except ValueError:
            return None


def _block(
    block: bytes, width: int, fields: list[tuple[int, type]], fcols: list[int], scratch: Scratch
) -> tuple[list[np.ndarray], np.ndarray | None] | None:
    """Columns ``fields`` (index, int64 or float64) and the float64 features ``fcols`` of a block of plain lines of
    ``width`` fields, or None where a line has another width or a token is not a number of its column's type.

    A block of plain decimals is read by :func:`~._common.decimal_fields` (without features, its lines' leading
    fields up to the last one read: :func:`~._common.leading_fields`), any other by ``np.loadtxt``
    (:func:`_load`); ``scratch`` holds :func:`~._common.decimal_fields`' arrays from one block to the next.
    """
    if fcols:
        table = decimal_fields(block, width, scratch)
    else:
        need = max(c for c, _ in fields) + 1
        lead = leading_fields(block, width, need)
        if lead is None:
            return None
        table = decimal_fields(lead, need, scratch)
    if table is None:
        if (fcols and leading_fields(block, width, 1) is None) or (rec := _load(block, fields, fcols)) is None:
            return None
        # copies: a view would hold the block's features too
        return [rec[f"c{j}"].copy() for j in range(len(fields))], rec["f"] if fcols else None
    ints, floats, dotted = table
    if any(t is np.int64 and dotted[:, c].any() for c, t in fields):
        return None  # "2.0" is no int64 token
    return [(ints if t is np.int64 else floats)[:, c].copy() for c, t in fields], floats[:, fcols] if fcols else None


def _read_blocks(
    src: InputBytes, start: int, width: int, fields: list[tuple[int, type]], fcols: list[int]
) -> tuple[list[np.ndarray], np.ndarray | None] | list[tuple[int, type]] | None:
    """Rows of ``src`` from byte ``start`` on, block by block (:func:`_block`).

    Args:
        src: the input, ending in a newline.
        start: where its first data row begins.
        width: the fields of every row (the first row's).
        fields: (column, int64 or float64) of the user and item ids (int64 always), the time and the label (each
            int64 until a token is not an integer: :func:`~._common.parse_numbers`' rule).
        fcols: the edge-feature columns (none: no features read).

    Returns:
        ``(columns, features)``: each of ``fields`` (E,) in file order and the features float32 (E, D) or None; or
        ``fields`` to read again from the start, a time or label column among them now float64 (a block past the
        first holds a token that is not an integer); or None where a block is not plain
        (:func:`~._common.plain_text`), a line spans more than :data:`_LINE_BLOCKS` blocks, a row has another
        width than ``width``, or a token parses as neither.
    """
    size = _BLOCK if fcols else _LEADING_BLOCK
    longest = _LINE_BLOCKS * size
    # a row per line, but no more than its fields' bytes allow (one and a separator each): blank lines are no rows
    rows = min(src.lines(start), (src.size - start) // (2 * width) + 1)
    features = np.empty((rows, len(fcols)), dtype=np.float32) if fcols else None
    parts: list[list[np.ndarray]] = [[] for _ in fields]
    n = 0
    scratch = Scratch()
    for k, view in enumerate(src.blocks(start, 1 << 16, size, longest)):
        if view is None or len(view) > longest + size:  # a block holds a line and at most a block's bytes more
            return None
        block = bytes(view)
        if not plain_text(block):
            return None
        got = _block(block, width, fields, fcols, scratch)
        if got is None:
            # int64 fails on a float token: float64 for the time or label column that holds one
            wide = fields[:2] + [(c, np.float64 if t is np.int64 and _load(block, [(c, t)], []) is None else t)
                                 for c, t in fields[2:]]
            got = None if wide == fields else _block(block, width, wide, fcols, scratch)
            if got is None:
                return None
            if k:
                return wide
            fields = wide
        columns, block_features = got
        for part, column in zip(parts, columns, strict=True):
            part.append(column)
        if features is not None:
            if not np.isfinite(block_features).all() or n + columns[0].shape[0] > rows:
                return None
            features[n : n + columns[0].shape[0]] = as_float32(block_features)
        n += columns[0].shape[0]
    return [np.concatenate(p) for p in parts], None if features is None else features[:n]


def _plain_table(
    path: Path, src: InputBytes, columns: dict[str, str] | None, labels: bool, events: bool
) -> _Table | None:
    """A plain JODIE csv (:func:`~._common.plain_text`, ending in a newline) read block by block (:func:`_block`), or
    None where the line-by-line reader must read it (and name the line of any error).

    Read so: rows of one width (the header's, read by name), integer ids (int64), times int64 when every one is
    an integer else finite float64 (:func:`~._common.parse_numbers`' rule), state labels 0 or 1, finite features;
    the arrays are those of the line-by-line reader (tests/data/test_prepare_jodie_plain.py), without a Python
    object per token (perf/results/prepare-scale).

    Args:
        path: the input, for :func:`_header_columns`.
        src: its bytes.
        columns: ``--columns``, or None.
        labels: read the state label (``--kind snapshots --labels state``).
        events: read the edge features, and require the label column (``--kind events``).
    """
    if src.last() != b"\n":  # a last line without one is watched for a cut by the line-by-line reader
        return None
    n = 1 << 16
    while True:  # the first two non-blank lines (the header's, and the first row's or the header's next)
        prefix = src.prefix(n)
        begin = len(BOM) if prefix.startswith(BOM) else 0
        head, first, after = _head(prefix, begin)
        if len(head) == 2 or len(prefix) >= src.size:
            break
        if n >= _LINE_BLOCKS * _LEADING_BLOCK:  # lines longer than _read_blocks reads
            return None
        n = min(8 * n, _LINE_BLOCKS * _LEADING_BLOCK)
    if not head:
        return None
    try:
        index, names, header = _header_columns(path, head[0], head[1] if len(head) > 1 else None, columns)
    except DataError:
        return None
    rows, start = (head[1:], after) if header is not None else (head, first)
    plain = plain_text(prefix[begin:start])
    del prefix  # up to some 8 times the first two lines, not to be held while the rows are read
    if not rows or not plain:
        return None
    width = rows[0][1].count(",") + 1
    if width < _need(index, labels or events):
        return None
    if read_by_name(columns):
        try:
            check_width(path, header, rows[0][0], width)
        except DataError:
            return None
    fcols, fnames = _feature_columns(header, width, set(index.values())) if events else ([], [])
    keys = ["src", "dst", "time"] + (["label"] if labels and "label" in index else [])
    fields: list[tuple[int, type]] = [(index[k], np.int64) for k in keys]
    while isinstance(got := _read_blocks(src, start, width, fields, fcols), list):
        fields = got
    if got is None:
        return None
    (users, items, time, *state), features = got
    if users.shape[0] == 0 or not np.isfinite(time).all():
        return None
    label = state[0] if state else None
    if label is not None:
        if ((label != 0) & (label != 1)).any():
            return None
        label = label.astype(np.int64)
    if header is None:
        note_numbered_first_line(path, head[0][0], split_fields(head[0][1], True, path, head[0][0]))
    return _Table(users, items, time, label, features, fnames, names)


def _data_rows(
    path: Path, src: InputBytes, columns: dict[str, str] | None
) -> tuple[LastLine, dict[str, int], dict[str, str], list[str] | None, bool, RowWidths]:
    """The data lines of a JODIE csv for the line-by-line reader (``src`` taken whole and decoded; it holds
    nothing after) and how to read them.

    Returns:
        ``(rows, index, names, header, quoted, widths)``: lazy ``(line number, stripped line)`` rows (watched for
        a last line cut short: call ``rows.check`` after them), the :func:`_header_columns` mapping, the fields of
        line 1 when it is a header, else None, whether the file holds a ``"`` (its rows are then split by
        :func:`~._common.quoted_fields`; one without is split by str.split, with no check per row), and the rows'
        width check (against the header's where columns are read by name).
    """
    data = src.take()  # the decoded text is what the rows read: the bytes go once it is made
    text = decode_input(path, data)
    del data
    # lazily: wikipedia/reddit rows carry 172 features each; no second copy of the text
    numbered = ((i, s) for i, line in enumerate(text.splitlines(), 1) if (s := line.strip()))
    head = list(itertools.islice(numbered, 2))
    if not head:
        raise DataError(f"{path}: no interactions (empty file or header only)")
    index, names, header = _header_columns(path, head[0], head[1] if len(head) > 1 else None, columns)
    if header is None:
        note_numbered_first_line(path, head[0][0], split_fields(head[0][1], True, path, head[0][0]))
    rows = LastLine(path, text, itertools.chain(head[1:] if header is not None else head, numbered))
    widths = RowWidths(path, (lambda ln, w: check_width(path, header, ln, w)) if read_by_name(columns) else None)
    return rows, index, names, header, '"' in text, widths


def _parse(
    path: Path, columns: dict[str, str] | None, labels: bool = True
) -> tuple[Sequence[str] | np.ndarray, Sequence[str] | np.ndarray, np.ndarray, np.ndarray | None, dict[str, str]]:
    """Columns user, item (tokens, or int64 from :func:`_plain_table`), time and state label (None without a label
    column, or unless ``labels``: a label column that is not used is not checked either) of a JODIE csv."""
    src = InputBytes(path)
    check_not_json(path, src.prefix(64), "jodie")
    plain = _plain_table(path, src, columns, labels, events=False)
    if plain is not None:
        return plain.users, plain.items, plain.time, plain.state, plain.names
    rows, index, names, header, quoted, widths = _data_rows(path, src, columns)
    users: list[str] = []
    items: list[str] = []
    times: list[str] = []
    states: list[str] = []
    lines: list[int] = []
    iu, ii, it = index["src"], index["dst"], index["time"]
    il = index.get("label") if labels else None
    need = _need(index, labels)
    label_name = _what("label", names)
    for lineno, s in rows:
        if quoted and '"' in s:
            parts = quoted_fields(s, ",", path, lineno)
            width = len(parts)
        else:
            parts = s.split(",", need)  # columns past the last mapped one (the features) are never split
            width = s.count(",") + 1
        if len(parts) < need:
            fields = ",".join(names[k] for k in index if k != "label" or labels)
            raise DataError(f"{path}:{lineno}: expected at least {need} fields ({fields}), got {len(parts)}")
        widths.see(lineno, width)
        users.append(parts[iu].strip())
        items.append(parts[ii].strip())
        times.append(parts[it].strip())
        if il is not None:
            states.append(parts[il].strip())
        lines.append(lineno)
    if not lines:
        raise DataError(f"{path}: no interactions (empty file or header only)")
    time = parse_numbers(times, lines, path, _what("time", names))
    rows.check(it == widths.width - 1 and last_breaks_order(time))
    if il is None:
        return users, items, time, None, names
    state = parse_numbers(states, lines, path, label_name)
    bad = (state != 0) & (state != 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{path}:{lines[i]}: {label_name} must be 0 or 1, got {shorten(states[i])!r}")
    return users, items, time, state.astype(np.int64), names


def _snapshots(
    src: np.ndarray, dst: np.ndarray, state: np.ndarray | None, n: int, slices: list[Slice]
) -> Iterator[RawSnapshot]:
    for s in slices:
        labels = None
        if state is not None:
            labels = np.full(n, -1, dtype=np.int64)
            # max over the window's interactions; users with none stay -1, items are never touched.
            np.maximum.at(labels, src[s.lo : s.hi], state[s.lo : s.hi])
        yield RawSnapshot(src=src[s.lo : s.hi], dst=dst[s.lo : s.hi], labels=labels, time=s.time)


def read_jodie(path: Path, opts: PrepareOptions) -> PreparedInput:
    """Read a JODIE csv into a bipartite user/item snapshot stream (rules in the module docstring).

    Raises:
        DataError: bad input, or ``--weights given`` (JODIE has no weight column).
    """
    if opts.weights == "given":
        raise DataError(f"{path}: --weights given: JODIE files have no weight column; use ones or count")
    columns = None if opts.columns is None else parse_columns(opts.columns, path, JODIE_COLUMN_KEYS, "jodie")
    users, items, time, state, names = _parse(path, columns, labels=opts.labels == "state")
    if opts.labels == "state" and state is None:
        raise DataError(
            f"{path}: --labels state needs a state label column; this file has none"
            + (
                " mapped (add label=COLUMN to --columns)"
                if columns is not None
                else " (map one with --columns label=NAME)"
            )
        )
    uidx, uids = remap_ids(users)
    iidx, iids = remap_ids(items)
    n_users = int(uids.shape[0])
    n = n_users + int(iids.shape[0])
    order = np.argsort(time, kind="stable")
    src, dst = uidx[order], (iidx + n_users)[order]
    time = time[order]
    state = None if state is None else state[order]
    slices = slice_events(time, path, **slicing_kwargs(opts))
    vertex_ids = np.array([f"u:{u}" for u in uids.tolist()] + [f"i:{i}" for i in iids.tolist()])
    with_state = opts.labels == "state"
    return PreparedInput(
        num_vertices=n,
        snapshots=_snapshots(src, dst, state if with_state else None, n, slices),
        vertex_ids=vertex_ids,
        num_classes=2 if with_state else 0,
        source={
            "events": int(src.shape[0]),
            "users": n_users,
            "items": int(iids.shape[0]),
            "time_min": float(time[0]),
            "time_max": float(time[-1]),
            "edge_features": "ignored",
            "columns": names,
        },
        **snapshot_counts(src, dst, n, slices, opts),
    )


#: Rows whose features are converted to floats at once (bounds the memory of the token lists).
_FEATURE_BLOCK = 1 << 15


def _feature_block(path: Path, rows: list[list[str]], lines: list[int], names: list[str]) -> np.ndarray:
    """A block of feature tokens as float64 (rows, D); a DataError naming the first bad token's line."""
    try:
        block = np.array(rows, dtype=np.float64).reshape(len(rows), len(names))
    except ValueError:
        block = None
    if block is None or not np.isfinite(block).all():
        for row, line in zip(rows, lines, strict=True):
            for tok, name in zip(row, names, strict=True):
                try:
                    ok = math.isfinite(float(tok))
                except ValueError:
                    ok = False
                if not ok:
                    raise DataError(f"{path}:{line}: edge feature {name!r} {tok.strip()!r} is not a finite number")
    return block


def parse_jodie_events(
    path: Path, columns: dict[str, str] | None
) -> tuple[Sequence[str] | np.ndarray, Sequence[str] | np.ndarray, np.ndarray, np.ndarray | None, list[str],
           dict[str, str]]:
    """User and item tokens (or int64 ids from :func:`_plain_table`), times, edge features and their names of a
    JODIE csv, in file order.

    Returns:
        ``(users, items, time, features, feature_names, column_names)``; ``features`` is
        float32 (E, D), or None when D = 0.

    Raises:
        DataError: ``path:line: problem`` for the first bad row or token.
    """
    src = InputBytes(path)
    check_not_json(path, src.prefix(64), "jodie")
    plain = _plain_table(path, src, columns, labels=False, events=True)
    if plain is not None:
        return plain.users, plain.items, plain.time, plain.features, plain.feature_names, plain.names
    data, index, names, header, quoted, widths = _data_rows(path, src, columns)
    iu, ii, it = index["src"], index["dst"], index["time"]
    need = max(index.values()) + 1
    users: list[str] = []
    items: list[str] = []
    times: list[str] = []
    lines: list[int] = []
    fcols: list[int] | None = None
    fnames: list[str] = []
    blocks: list[np.ndarray] = []
    rows: list[list[str]] = []
    row_lines: list[int] = []
    for lineno, s in data:
        parts = quoted_fields(s, ",", path, lineno) if quoted and '"' in s else s.split(",")
        width = len(parts)
        if fcols is None and width < need:
            fields = ",".join(names[k] for k in index)
            raise DataError(f"{path}:{lineno}: expected at least {need} fields ({fields}), got {width}")
        if widths.see(lineno, width):
            fcols, fnames = _feature_columns(header, width, set(index.values()))
        users.append(parts[iu].strip())
        items.append(parts[ii].strip())
        times.append(parts[it].strip())
        lines.append(lineno)
        if fcols:
            rows.append([parts[j] for j in fcols])
            row_lines.append(lineno)
            if len(rows) == _FEATURE_BLOCK:
                blocks.append(as_float32(_feature_block(path, rows, row_lines, fnames)))
                rows, row_lines = [], []
    if not lines:
        raise DataError(f"{path}: no interactions (empty file or header only)")
    if rows:
        blocks.append(as_float32(_feature_block(path, rows, row_lines, fnames)))
    time = parse_numbers(times, lines, path, _what("time", names))
    data.check(it == widths.width - 1 and last_breaks_order(time))
    features = np.concatenate(blocks) if blocks else None
    return users, items, time, features, fnames, names
