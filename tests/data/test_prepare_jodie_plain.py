"""``prepare --format jodie``'s two readers: numpy's C reader for plain numeric csvs and the line-by-line one for the
rest (``hpcdgnn/data/prepare/jodie.py``) give the same arrays, dtypes and datasets byte for byte; a file the fast
reader does not take still gets the line-by-line reader's one-line errors."""

from __future__ import annotations

import filecmp
import gzip
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcdgnn.data.prepare import _common, jodie, prepare_dataset
from hpcdgnn.errors import DataError

JODIE_HEAD = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features"


def _rows(rng, n: int, features: int, time: str = "float", label: str = "int", lead: bool = False) -> list[str]:
    """``n`` csv rows ``[index,]user,item,time,label[,features]`` in time order (ties and -0.0 included)."""
    t = np.sort(rng.integers(0, 10**6, n))
    out = []
    for k in range(n):
        ts = {"float": f"{float(t[k])!r}", "int": str(int(t[k])), "frac": f"{t[k] / 7:.5f}"}[time]
        row = [str(rng.integers(0, 50)), str(rng.integers(1000, 1040)), ts, str(int(rng.random() < 0.2))]
        if label == "float":
            row[3] += ".0"
        row += [f"{x:.6f}" for x in rng.normal(size=features)]
        if features and k % 7 == 0:
            row[-1] = "-0.000000"  # a negative zero: float32 keeps its sign
        out.append(",".join(([str(k)] if lead else []) + row))
    return out


def _write(tmp_path: Path, text: str, name: str = "in.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def _spy(monkeypatch) -> list[bool]:
    """Record whether the fast reader took each file it was given."""
    taken: list[bool] = []
    real = jodie._plain_table

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(jodie, "_plain_table", spy)
    return taken


def _slow(monkeypatch) -> None:
    monkeypatch.setattr(jodie, "_plain_table", lambda *args, **kwargs: None)


def _same_array(x, y, name: str) -> None:
    """Same dtype, shape and bytes (so 0.0 and -0.0 differ)."""
    if y is None:
        assert x is None, name
        return
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape, (name, x.dtype, y.dtype, x.shape, y.shape)
    assert (x.tolist() == y.tolist()) if x.dtype == object else x.tobytes() == y.tobytes(), name


def _same_ids(x, y, name: str) -> None:
    """The ids as prepare uses them: remapped to 0..N-1 and the sorted original ids."""
    for a, b, what in zip(_common.remap_ids(x), _common.remap_ids(y), ("index", "ids"), strict=True):
        _same_array(a, b, f"{name} {what}")


def _both(path: Path, monkeypatch, events: bool, columns=None, labels: bool = True) -> bool:
    """Read ``path`` by both readers, check the results agree; whether the fast reader took it."""
    taken = _spy(monkeypatch)
    if events:
        fast = jodie.parse_jodie_events(path, columns)
    else:
        fast = jodie._parse(path, columns, labels)
    _slow(monkeypatch)
    slow = jodie.parse_jodie_events(path, columns) if events else jodie._parse(path, columns, labels)
    _same_ids(fast[0], slow[0], "users")
    _same_ids(fast[1], slow[1], "items")
    _same_array(fast[2], slow[2], "time")
    _same_array(fast[3], slow[3], "features" if events else "state")
    assert fast[4:] == slow[4:]  # feature names, column names
    monkeypatch.undo()
    return taken[0]


@pytest.mark.parametrize("events", [False, True])
@pytest.mark.parametrize("time", ["float", "int", "frac"])
def test_jodie_files_read_the_same_by_both_readers(tmp_path, monkeypatch, events, time):
    rng = np.random.default_rng(["float", "int", "frac"].index(time))
    path = _write(tmp_path, JODIE_HEAD + "\n" + "".join(r + "\n" for r in _rows(rng, 300, 5, time)))
    assert _both(path, monkeypatch, events)


@pytest.mark.parametrize("events", [False, True])
def test_tgl_files_read_the_same_by_both_readers(tmp_path, monkeypatch, events):
    """TGL's ml_*.csv (a leading unnamed row index, ``idx``: no features) and a TGL header naming its features."""
    rng = np.random.default_rng(7)
    ml = _write(tmp_path, ",u,i,ts,label,idx\n" + "".join(
        r + f",{k + 1}\n" for k, r in enumerate(_rows(rng, 200, 0, label="float", lead=True))), "ml.csv")
    assert _both(ml, monkeypatch, events)
    named = _write(tmp_path, "u,i,ts,label,f_a,f_b,ext_roll\n" + "".join(
        r + f",{k % 3}\n" for k, r in enumerate(_rows(rng, 200, 2))), "named.csv")
    assert _both(named, monkeypatch, events)


@pytest.mark.parametrize("events", [False, True])
def test_no_features_crlf_blank_lines_bom_gzip(tmp_path, monkeypatch, events):
    rng = np.random.default_rng(3)
    rows = _rows(rng, 120, 0)
    four = _write(tmp_path, "user_id,item_id,timestamp,state_label\n" + "".join(r + "\n" for r in rows), "four.csv")
    assert _both(four, monkeypatch, events)
    rows = _rows(rng, 120, 3)
    crlf = "\r\n\r\n" + JODIE_HEAD + "\r\n" + "".join(r + "\r\n" for r in rows[:60]) + "\r\n" + "".join(
        r + "\r\n" for r in rows[60:]) + "\r\n"
    assert _both(_write(tmp_path, crlf, "crlf.csv"), monkeypatch, events)
    trailing = JODIE_HEAD + "\n" + "".join(r + "\n" for r in rows) + "\n"
    assert _both(_write(tmp_path, trailing, "trailing.csv"), monkeypatch, events)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + trailing.encode())
    assert _both(bom, monkeypatch, events)
    gz = tmp_path / "in.csv.gz"
    gz.write_bytes(gzip.compress(trailing.encode()))
    assert _both(gz, monkeypatch, events)
    padded = JODIE_HEAD + "\n" + "".join(" " + r.replace(",", " ,\t", 2) + "  \n" for r in rows)
    assert _both(_write(tmp_path, padded, "padded.csv"), monkeypatch, events)


@pytest.mark.parametrize("events", [False, True])
def test_a_float_time_after_the_first_block(tmp_path, monkeypatch, events):
    """Integer times, then one float past the first block read: every time is float64, as parse_numbers reads
    them, -0 too (-0.0, not 0.0)."""
    rng = np.random.default_rng(5)
    rows = _rows(rng, 3000, 4, time="int")
    rows[0] = rows[0].split(",", 3)
    rows[0][2] = "-0"
    rows[0] = ",".join(rows[0])
    rows[-1] = ",".join(rows[-1].split(",")[:2] + ["1000000.5"] + rows[-1].split(",")[3:])
    path = _write(tmp_path, JODIE_HEAD + "\n" + "".join(r + "\n" for r in rows))
    assert path.stat().st_size > 1 << 17
    assert _both(path, monkeypatch, events)
    assert jodie.parse_jodie_events(path, None)[2].dtype == np.float64


@pytest.mark.parametrize("events", [False, True])
def test_columns_by_name_and_by_index(tmp_path, monkeypatch, events):
    rng = np.random.default_rng(11)
    rows = [r.split(",") for r in _rows(rng, 150, 2)]
    head = "when,who,what,flag,a,b"
    text = head + "\n" + "".join(",".join([r[2], r[0], r[1], *r[3:]]) + "\n" for r in rows)
    by_name = {"src": "who", "dst": "what", "time": "when", "label": "flag"}
    assert _both(_write(tmp_path, text, "named.csv"), monkeypatch, events, by_name)
    by_index = {"src": "1", "dst": "2", "time": "0", "label": "3"}
    assert _both(_write(tmp_path, text.split("\n", 1)[1], "headless.csv"), monkeypatch, events, by_index)
    assert _both(_write(tmp_path, text, "named.csv"), monkeypatch, events, by_index)


def test_an_unused_label_is_not_read(tmp_path, monkeypatch):
    """--kind snapshots without --labels state neither reads nor needs the label column."""
    text = JODIE_HEAD + "\n" + "".join(f"{k},{k + 9},{k}.5,x\n" for k in range(20))
    assert _both(_write(tmp_path, text), monkeypatch, False, labels=False)


@pytest.mark.parametrize("text", [
    JODIE_HEAD + '\n1,2,3.0,0,0.5\n"4",5,6.0,0,0.5\n',  # a quoted field
    JODIE_HEAD + "\na,b,3.0,0,0.5\nc,d,6.0,0,0.5\n",  # string ids
    JODIE_HEAD + "\n1.5,2,3.0,0,0.5\n4,5,6.0,0,0.5\n",  # a float id: an id string for the other reader
    JODIE_HEAD + "\n1,2,3.0,0,0.5\n4,5,6.0,0,0.5",  # no newline at the end: the cut-line check reads it
    JODIE_HEAD + "\n1,2,1_000,0,0.5\n",  # Python reads 1_000, numpy's C reader does not
    JODIE_HEAD + "\n1,2,3.0,0,0.5\n\u00e94,5,6.0,0,0.5\n",  # not ASCII
    JODIE_HEAD + "\n1,2,3.0,0,0.5\r4,5,6.0,0,0.5\r",  # old Mac line ends
    JODIE_HEAD + "\n1,2,3.0,0,0.5\n   \n4,5,6.0,0,0.5\n",  # a line of blanks
    JODIE_HEAD + "\n1,2,3,0,0.5\n4,5,6,1,\x1f2.5\n",  # np.loadtxt strips U+001F, as str.strip, float() does not
])
@pytest.mark.parametrize("events", [False, True])
def test_other_files_go_to_the_line_reader(tmp_path, monkeypatch, text, events):
    path = _write(tmp_path, text)
    assert jodie._plain_table(path, _common.InputBytes(path), None, not events, events) is None
    try:
        _both(path, monkeypatch, events)
    except DataError as e:
        monkeypatch.undo()
        _slow(monkeypatch)
        with pytest.raises(DataError) as slow:
            jodie.parse_jodie_events(path, None) if events else jodie._parse(path, None, True)
        assert str(e) == str(slow.value)


@pytest.mark.parametrize("bad, error", [
    ("4,5,x,0,0.5", ":3: cannot parse timestamp 'x'"),
    ("4,5,nan,0,0.5", ":3: timestamp 'nan' is not a finite number"),
    ("4,5,6.0,2,0.5", ":3: state_label must be 0 or 1, got '2'"),
    ("4,5,6.0,0,", ":3: edge feature 'comma_separated_list_of_features' '' is not a finite number"),
    ("4,5,6.0,0,inf", ":3: edge feature 'comma_separated_list_of_features' 'inf' is not a finite number"),
    ("4,5,6.0,0,0.5,7", ":3: expected 5 fields like line 2, got 6"),
    ("4,5,6.0", ":3: expected "),  # at least 4 fields (snapshots), 5 like line 2 (events)
])
@pytest.mark.parametrize("events", [False, True])
def test_bad_plain_files_get_the_line_readers_error(tmp_path, monkeypatch, bad, error, events):
    """A file that looks plain but holds a bad row goes to the line-by-line reader: the same error, with its line
    (and column, or what is wrong), as before."""
    path = _write(tmp_path, f"{JODIE_HEAD}\n1,2,3.0,0,0.5\n{bad}\n4,5,7.0,1,0.25\n")
    read = (lambda: jodie.parse_jodie_events(path, None)) if events else (lambda: jodie._parse(path, None, True))
    try:
        read()
    except DataError as e:
        fast = str(e)
    else:
        fast = None
    _slow(monkeypatch)
    try:
        read()
    except DataError as e:
        slow = str(e)
    else:
        slow = None
    assert fast == slow
    if slow is not None:  # some rows are bad for one kind only (a feature --kind snapshots does not read)
        assert error in slow
    assert events or "edge feature" not in error or slow is None


def test_a_header_of_another_width_is_refused_as_before(tmp_path, monkeypatch):
    path = _write(tmp_path, "u,i,ts,label,f1,f2\n1,2,3.0,0,0.5\n4,5,6.0,1,0.25\n")
    with pytest.raises(DataError) as fast:
        jodie.parse_jodie_events(path, None)
    _slow(monkeypatch)
    with pytest.raises(DataError) as slow:
        jodie.parse_jodie_events(path, None)
    assert str(fast.value) == str(slow.value) and "5 fields, but the header names 6" in str(slow.value)


def _datasets(root: Path) -> dict:
    """Every HDF5 dataset under ``root`` (path -> array) and the manifests."""
    out = {}
    for f in sorted(root.rglob("*")):
        if f.suffix == ".h5":
            with h5py.File(f) as h:
                h.visititems(lambda name, obj, f=f: out.__setitem__(f"{f.relative_to(root)}/{name}", obj[()])
                             if isinstance(obj, h5py.Dataset) else None)
        elif f.suffix == ".json":
            out[str(f.relative_to(root))] = json.loads(f.read_text())
    return out


@pytest.mark.parametrize("kind, options", [
    ("snapshots", {"snapshots": 4, "labels": "state"}),
    ("snapshots", {"events_per_snapshot": 100, "targets": "next_degree"}),
    ("events", {}),
])
def test_prepared_datasets_are_byte_identical(tmp_path, monkeypatch, kind, options):
    rng = np.random.default_rng(13)
    path = _write(tmp_path, JODIE_HEAD + "\n" + "".join(r + "\n" for r in _rows(rng, 400, 6)))
    taken = _spy(monkeypatch)
    prepare_dataset(path, "jodie", tmp_path / "fast", kind=kind, **options)
    assert taken == [True]
    _slow(monkeypatch)
    prepare_dataset(path, "jodie", tmp_path / "slow", kind=kind, **options)
    fast, slow = _datasets(tmp_path / "fast"), _datasets(tmp_path / "slow")
    assert fast.keys() == slow.keys() and len(fast) > 3
    for name, value in slow.items():
        if isinstance(value, np.ndarray):
            _same_array(fast[name], value, name)
        else:
            assert fast[name] == value, name
    files = sorted(p.relative_to(tmp_path / "slow") for p in (tmp_path / "slow").rglob("*") if p.is_file())
    assert all(filecmp.cmp(tmp_path / "fast" / p, tmp_path / "slow" / p, shallow=False) for p in files)


# --------------------------------------------------------------------------- decimals read from the bytes


def _decimal(rng, digits: int) -> str:
    """A plain decimal of at most ``digits`` digits: a sign or none, leading zeros, a point or none, '5.' and '.5'."""
    sign = rng.choice(["", "", "-", "+"])
    n = int(rng.integers(1, digits + 1))
    body = "".join(rng.choice(list("0123456789"), n)) if rng.random() < 0.8 else "0" * (n - 1) + "7"
    if rng.random() < 0.7:
        at = int(rng.integers(0, n + 1))
        body = body[:at] + "." + body[at:]
    return sign + body


@pytest.mark.parametrize("digits", [9, 15, 18])
def test_decimal_fields_are_the_numbers_python_reads(digits):
    """Each field as float() reads it, bit for bit (-0.0 too; parse_numbers and np.loadtxt read the same), and as
    int() reads it where it has no point: the mantissa's sums in int32 (9 digits at most) or int64."""
    rng = np.random.default_rng(digits)
    width, rows = 7, 3000
    tokens = [_decimal(rng, digits) for _ in range(width * rows)]
    tokens = [t if "." not in t or len(t.strip("+-.").lstrip("0")) <= 15 else t.replace(".", "") for t in tokens]
    tokens[:8] = ["-0", "-0.0", "+0.", "-.5", "5.", "007", "9007199254740993", "9007199254740993."]
    block = "".join(",".join(tokens[r * width : (r + 1) * width]) + "\n" for r in range(rows)).encode()
    ints, floats, dotted = _common.decimal_fields(block, width)
    want = np.array([float(t) for t in tokens]).reshape(rows, width)
    assert floats.tobytes() == want.tobytes()
    _same_array(floats, np.array(tokens, dtype=np.float64).reshape(rows, width), "numpy")
    assert dotted.tolist() == [["." in t for t in tokens[r * width : (r + 1) * width]] for r in range(rows)]
    whole = ~dotted.reshape(-1)
    assert ints.reshape(-1)[whole].tolist() == [int(t) for t, w in zip(tokens, whole, strict=True) if w]
    crlf = block.replace(b"\n", b"\r\n").replace(b"\r\n", b"\r\n\r\n", 3)
    assert all(np.array_equal(a, b) for a, b in zip(_common.decimal_fields(b"\n" + crlf, width),
                                                    (ints, floats, dotted), strict=True))


@pytest.mark.parametrize("text", [
    "1,2\n3\n", "1,2,3\n4,5,6\n", "1,2\n3,4,5\n",  # another width
    "1,2e5\n", "1,nan\n", "1, 2\n", "1,\n", "1,-\n", "1,.\n", "1,1.2.3\n", "1,1-2\n", "1,+-1\n", "1,--1\n",
    "1,1234567890123456789\n",  # 19 digits
    "1,9007199254740993.5\n",  # a mantissa past 2^53 with digits after the point: no exact quotient
    "\n", "\r\n\n",
])
def test_decimal_fields_leave_anything_else_to_the_other_readers(text):
    assert _common.decimal_fields(text.encode(), 2) is None


@pytest.mark.parametrize("features", ["exponent", "long", "both"])
def test_blocks_read_by_decimals_and_by_loadtxt_agree(tmp_path, monkeypatch, features):
    """A file whose blocks go some to decimal_fields, some to np.loadtxt (an exponent, 19 digits), and features of
    more than 9 digits (int64 sums): the arrays of the line-by-line reader."""
    rng = np.random.default_rng(17)
    rows = [r.split(",") for r in _rows(rng, 6000, 3)]
    for k, r in enumerate(rows):
        if features in ("exponent", "both") and k == 4000:
            r[-1] = "1.5e-3"
        if features in ("long", "both") and k % 3 == 0:
            r[-2] = f"{rng.uniform(-1, 1):.15f}"
        if features == "long" and k == 5000:
            r[-3] = "1234567890.1234567891"  # 20 digits
    path = _write(tmp_path, JODIE_HEAD + "\n" + "".join(",".join(r) + "\n" for r in rows))
    assert path.stat().st_size > 1 << 18
    assert _both(path, monkeypatch, True)


@pytest.mark.parametrize("text, width, need, lines", [
    ("1,2,3\n4,5,6\n", 3, 2, "1,2\n4,5\n"),
    ("1,2,3\r\n\r\n\n4,5,6\r\n", 3, 3, "1,2,3\r\n4,5,6\r\n"),  # blank lines skipped; the last field keeps its \r
    (",2,3\n4,,\n", 3, 1, "\n4\n"),  # empty fields
    ("1\n\n2\n", 1, 1, "1\n2\n"),
    ("\n\r\n", 3, 1, ""),
    ("1,2,3\n4,5\n", 3, 1, None), ("1,2\n3,4,5\n", 3, 1, None), ("1,2,3,4\n5,6\n", 3, 1, None),
    ("1,2,3\n  \n4,5,6\n", 3, 1, None),  # a line of blanks: one field
])
def test_leading_fields_keep_each_lines_first_fields(text, width, need, lines):
    out = _common.leading_fields(text.encode(), width, need)
    assert out == (None if lines is None else lines.encode())


@pytest.mark.parametrize("events", [False, True])
def test_many_blocks_of_leading_fields(tmp_path, monkeypatch, events):
    """Rows of many fields, of which --kind snapshots reads the first four, over blocks of lines, TGL's leading index
    column included."""
    rng = np.random.default_rng(19)
    rows = _rows(rng, 4000, 40, lead=True)
    path = _write(tmp_path, ",u,i,ts,label," + ",".join(f"f{k}" for k in range(40)) + "\n"
                  + "".join(r + "\n" for r in rows))
    assert path.stat().st_size > 1 << 20
    assert _both(path, monkeypatch, events)


def test_scratch_arrays_reused_from_block_to_block():
    """decimal_fields with arrays kept from a larger block, then a smaller one (where stale values would show),
    reads each block as it reads it alone; the arrays are reused, not made anew per block."""
    rng = np.random.default_rng(23)
    big = "".join(",".join(_decimal(rng, 12) for _ in range(5)) + "\n" for _ in range(400)).encode()
    small = "".join(",".join(_decimal(rng, 6) for _ in range(5)) + "\n" for _ in range(50)).encode()
    scratch = _common.Scratch()
    for block in (big, small, big):
        for a, b in zip(_common.decimal_fields(block, 5, scratch), _common.decimal_fields(block, 5), strict=True):
            _same_array(a, b, "scratch")
    key = scratch.get("key", 10, np.intp)
    assert key.base is not None and key.base.shape[0] >= len(big)


@pytest.mark.parametrize("first, size", [(1, 1), (10, 7), (1 << 16, 1 << 20)])
def test_input_bytes_read_a_file_in_blocks_of_whole_lines(tmp_path, first, size):
    text = b"head\n" + b"".join(b"%d,%s\n" % (k, b"x" * (k % 23)) for k in range(300)) + b"y" * 50 + b"\n"
    path = tmp_path / "in.csv"
    path.write_bytes(text)
    src = _common.InputBytes(path)
    assert src.data is None and src.size == len(text)  # read from disk, not held
    blocks = [bytes(b) for b in src.blocks(5, first, size)]
    assert b"".join(blocks) == text[5:] and all(b.endswith(b"\n") for b in blocks)
    assert src.prefix(7) == text[:7] and src.last() == b"\n" and src.lines(5) == 301 and src.whole() == text
    gz = tmp_path / "in.csv.gz"
    gz.write_bytes(gzip.compress(text))
    held = _common.InputBytes(gz)
    assert held.data == text and b"".join(bytes(b) for b in held.blocks(5, first, size)) == text[5:]


@pytest.mark.parametrize("content", [
    None, b"version https://git-lfs.github.com/spec/v1\noid sha256:0\n", b"\x1f\x8bxx", b"PK\x03\x04zip",
])
def test_input_bytes_refuses_as_read_input_bytes(tmp_path, content):
    path = tmp_path / "in.csv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError) as want:
        _common.read_input_bytes(path)
    with pytest.raises(DataError) as got:
        _common.InputBytes(path)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("events", [False, True])
def test_lines_longer_than_a_block(tmp_path, monkeypatch, events):
    rng = np.random.default_rng(29)
    path = _write(tmp_path, JODIE_HEAD + "\n" + "".join(r + "\n" for r in _rows(rng, 40, 9000)))
    assert path.stat().st_size / 41 > 1 << 16
    assert _both(path, monkeypatch, events)


@pytest.mark.parametrize("events", [False, True])
def test_lines_far_longer_than_a_block_take_no_more_memory_than_the_line_reader(tmp_path, monkeypatch, events):
    """Two rows of 2 MiB (events: 16 times a block) or 10 MiB (snapshots: 10 times one) each: the fast reader's
    arrays of numbers per byte of a block would be some 30 bytes per byte of a line; its peak stays the line-by-line
    reader's."""
    import tracemalloc

    rng = np.random.default_rng(31)
    n = (2 << 20 if events else 10 << 20) // 10
    feats = ",".join(f"{x:.6f}" for x in rng.normal(size=n))
    path = _write(tmp_path, JODIE_HEAD + "\n" + "".join(f"{k},{k + 5},{k}.0,0,{feats}\n" for k in range(2)))

    def peak() -> int:
        tracemalloc.start()
        try:
            jodie.parse_jodie_events(path, None) if events else jodie._parse(path, None, True)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    fast = peak()
    _slow(monkeypatch)
    slow = peak()
    assert fast <= 1.1 * slow, (fast >> 20, slow >> 20)


def test_blank_lines_do_not_count_as_rows_of_features(tmp_path, monkeypatch):
    """200,000 blank lines among two rows of 100 features: the features are not held for a row per line (80 MB), the
    file is read by the fast reader, and its peak stays the line-by-line reader's but for a block's arrays (some 30
    bytes per byte of a block)."""
    import tracemalloc

    feats = ",".join(["0.5"] * 100)
    path = _write(tmp_path, f"{JODIE_HEAD}\n1,2,3.0,0,{feats}\n" + "\n" * 200_000 + f"4,5,6.0,1,{feats}\n")

    def peak() -> int:
        tracemalloc.start()
        try:
            jodie.parse_jodie_events(path, None)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    taken = _spy(monkeypatch)
    fast = peak()
    assert taken == [True]
    monkeypatch.undo()
    _slow(monkeypatch)
    slow = peak()
    assert fast <= slow + 40 * jodie._BLOCK, (fast >> 10, slow >> 10)
    monkeypatch.undo()
    assert _both(path, monkeypatch, True)
