"""Helpers shared by the ``prepare`` readers: input decoding, id remapping, time slicing, labels.

Each reader (:mod:`.snap`, :mod:`.jodie`, :mod:`.pygt_json`) turns one raw format into a
:class:`PreparedInput` for :func:`~hpcdgnn.data.writer.write_dataset`; time slicing (SPEC
"Data model") is :func:`slice_events`.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import operator
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hpcdgnn.data.writer import RawSnapshot
from hpcdgnn.errors import DataError
from hpcdgnn.indices import unique_ints

__all__ = [
    "PrepareOptions",
    "PreparedInput",
    "read_input_bytes",
    "read_input_text",
    "decode_input",
    "plain_text",
    "BOM",
    "InputBytes",
    "line_blocks",
    "leading_fields",
    "decimal_fields",
    "Scratch",
    "parse_numbers",
    "remap_ids",
    "slice_events",
    "Slice",
    "with_next_activity",
    "with_next_degree",
    "next_degree",
    "MAX_SNAPSHOTS",
    "COLUMN_KEYS",
    "COLUMN_ALIASES",
    "parse_columns",
    "resolve_columns",
    "split_fields",
    "quoted_fields",
    "comma_separated",
    "looks_like_header",
    "note_numbered_first_line",
    "describe_header",
    "check_header_width",
    "RowWidths",
    "LastLine",
    "check_unterminated_line",
    "check_separator",
    "check_not_json",
    "last_breaks_order",
    "read_by_name",
    "guess_columns",
    "stored_edges_per_slice",
    "concat_snapshots",
    "check_given_weights",
    "whole",
    "shorten",
]

#: A too-small ``--window`` would otherwise write millions of empty snapshots.
MAX_SNAPSHOTS = 100_000

#: Snapshot count used when none of --snapshots/--window/--events-per-snapshot is given.
DEFAULT_SNAPSHOTS = 32

#: Lagged signal length for PyGT signal datasets when --lags is not given (PyGT's default for most loaders).
DEFAULT_LAGS = 4

_GZIP = b"\x1f\x8b"
_XZ = b"\xfd7zXZ\x00"
_BZ2 = b"BZh"
#: Containers read by no standard-library module of Python 3.11: named, not decoded as text.
_UNREAD = {b"\x28\xb5\x2f\xfd": ("zstd-compressed", "zstd -d"), b"PK\x03\x04": ("a zip archive", "unzip")}
#: What a clone or a download leaves in place of the data: the start of the file, what it is, what to do.
_NOT_DATA = (
    (b"version https://git-lfs.github.com/spec/", "a Git LFS pointer, not the data it stands for",
     "fetch the data with 'git lfs pull' in its repository"),
    (b"<!doctype html", "an HTML page, not data", "a download saved an error or login page: download the file again"),
    (b"<html", "an HTML page, not data", "a download saved an error or login page: download the file again"),
)


@dataclass(frozen=True, kw_only=True)
class PrepareOptions:
    """Options of ``hpcdgnn prepare`` (one field per CLI flag; see :func:`add_prepare_arguments`)."""

    snapshots: int | None = None
    """--snapshots T: T equal time slices over [tmin, tmax]."""
    window: float | None = None
    """--window S: slices [tmin + kS, tmin + (k+1)S)."""
    events_per_snapshot: int | None = None
    """--events-per-snapshot K: consecutive groups of K time-sorted events."""
    undirected: bool = False
    """--undirected: store every edge in both directions."""
    reverse_edges: bool = False
    """--reverse-edges: store each edge (u, v) as (v, u), so that Ã·X sums at each edge's destination, as PyG's
    layers do (docs/data.md, "Edge direction")."""
    weights: str = "ones"
    """--weights ones|count|given: edge weight before smoothing (writer step 1)."""
    edge_life: int = 1
    """--edge-life l (IBM §5.4; 1 = off)."""
    mtransform: int = 1
    """--mtransform w (IBM §5.3/§5.4; 1 = off)."""
    log_features: bool = False
    """--log-features: log1p of the degree features (IBM §6.1 features)."""
    labels: str = "none"
    """--labels none|next_activity|state|target_bins."""
    targets: str = "none"
    """--targets none|next_degree|next_log_degree: float node targets derived from the edges (snap, jodie)."""
    shard_size: int = 8
    """--shard-size: snapshots per shard file."""
    lags: int | None = None
    """--lags: lagged-signal length for PyGT signal datasets (default 4)."""
    force: bool = False
    """--force: replace a non-empty output directory."""
    columns: str | None = None
    """--columns src=A,dst=B,time=C[,label=D|,weight=D]: which input columns hold what (snap, jodie)."""
    allow_large: bool = False
    """--allow-large: write even when the size estimate exceeds the limits of :mod:`._estimate`."""


@dataclass
class PreparedInput:
    """A parsed raw input; ``snapshots`` is a lazy iterable consumed once, in time order."""

    num_vertices: int
    snapshots: Iterable[RawSnapshot]
    vertex_ids: np.ndarray | None
    """The input's id of each vertex 0..N-1; None where they are 0..N-1 themselves (arrays numbered already:
    nothing as large as N is made before the size check, N the largest id + 1 of maybe sparse ids)."""
    feature_names: list[str] | None = None
    num_classes: int = 0
    targets: str | None = None
    """Name of the float node targets the reader attaches to every snapshot (pygt-json), or None."""
    has_weights: bool = False
    source: dict[str, Any] = field(default_factory=dict)
    snapshot_edges: list[int] | None = None
    """Distinct stored edges per raw snapshot, known up front for the size estimate of :mod:`._estimate`."""
    snapshot_nnz: list[int] | None = None
    """Entries of each A_t after smoothing (the manifest's ``snapshot_nnz``), likewise."""


def whole(value: Any) -> int | None:
    """``value`` as an int where it is an integer (Python's, numpy's, a torch scalar; not a bool), else None: the
    Python API hands options over untyped, and int() would read "2" or 2.5 as a count."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def shorten(token: str, limit: int = 60) -> str:
    """``token`` cut to ``limit`` characters with '…': an error line echoes input, which may be a megabyte."""
    return token if len(token) <= limit else token[: limit - 1] + "…"


def check_given_weights(path: Path | str, weights: Iterable[np.ndarray], what: str = "--weights given",
                        fix: str = "use --weights ones or count") -> None:
    """Refuse negative given weights, naming the smallest: GCN's ``D^{-1/2} A D^{-1/2}`` needs non-negative
    degrees (one check for every reader and the Python API)."""
    low = min((float(w.min()) for w in weights if w.size), default=0.0)
    if low < 0:
        raise DataError(f"{path}: {what}: negative weights (min {low:g}) cannot be GCN-normalised; {fix}")


def read_input_bytes(path: Path) -> bytes:
    """Whole decompressed content of ``path``; gzip, xz and bz2 are detected by magic bytes, not suffix.

    Raises:
        DataError: missing/unreadable file, corrupt compressed stream, a zstd, zip or tar archive (a tar one
            compressed too), or what stands in for the data (a Git LFS pointer, an HTML page), naming ``path``.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: input file does not exist") from None
    except IsADirectoryError:
        if (path / "manifest.json").is_file():  # prepared already: what a job reads, not what prepare reads
            raise DataError(f"{path}: is a dataset directory (it holds manifest.json), not an input file: give it to "
                            "a job as data.path, or 'hpcdgnn inspect' it") from None
        raise DataError(f"{path}: is a directory, expected an input file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    data = raw
    try:
        if raw.startswith(_GZIP):
            data = gzip.decompress(raw)
        elif raw.startswith(_XZ):
            data = lzma.decompress(raw)
        elif raw.startswith(_BZ2):
            data = bz2.decompress(raw)
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as e:
        raise DataError(f"{path}: corrupt compressed input: {e}") from None
    if data is raw:
        _check_raw(path, raw)
    else:
        _check_tar(path, data)  # a .tar.gz / .tar.bz2 (KONECT's downloads): the archive is what decompresses
    return data


def _check_raw(path: Path, raw: bytes) -> None:
    """Refuse what :func:`read_input_bytes` does not read from a file that is not gzip, xz or bz2 (its first
    :data:`TAR_HEADER` bytes ``raw`` tell): zstd, zip, tar, a Git LFS pointer, an HTML page.

    Raises:
        DataError: naming ``path``, what it is and what to do.
    """
    for magic, (what, tool) in _UNREAD.items():
        if raw.startswith(magic):
            raise DataError(f"{path}: {what}, which prepare does not read (plain, gzip, xz or bz2): extract it "
                            f"first ({tool} {path})")
    _check_tar(path, raw)
    head = raw[:64].removeprefix(b"\xef\xbb\xbf").lstrip().lower()  # a BOM, as the reader drops it
    for start, what, fix in _NOT_DATA:
        if head.startswith(start):
            raise DataError(f"{path}: {what}; {fix}")


#: Where a POSIX (ustar) or GNU tar header holds its magic: the member's name is the header's first 100 bytes.
_TAR_MAGIC_AT = 257
#: Bytes of an input that :func:`_check_tar` needs: one tar header block.
TAR_HEADER = 512


def _check_tar(path: Path, data: bytes) -> None:
    """Refuse a tar archive (``data``: the input's first :data:`TAR_HEADER` bytes or more, decompressed), which
    would otherwise read as text whose first line is the member's header ("line 2: expected 4 columns like line
    1"): KONECT and many mirrors ship an edge list as ``.tar.bz2`` or ``.tar.gz``.

    Raises:
        DataError: naming ``path``, the archive's first member and the command that extracts it.
    """
    if len(data) < TAR_HEADER or data[_TAR_MAGIC_AT : _TAR_MAGIC_AT + 5] != b"ustar":
        return
    # the header's checksum (octal at bytes 148-155: the sum of its bytes, that field counted as spaces) too: text
    # may hold 'ustar' at byte 257 (an id 'mustard')
    try:
        stored = int(data[148:156].split(b"\0", 1)[0].strip() or b"-", 8)
    except ValueError:
        return
    if stored != sum(data[:148]) + 8 * 32 + sum(data[156:TAR_HEADER]):
        return
    member = data[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
    raise DataError(f"{path}: a tar archive (first member {shorten(member)!r}), which prepare does not read: extract "
                    f"it first (tar xf {path}) and give the edge-list file it holds")


def check_not_json(path: Path, head: bytes, fmt: str) -> None:
    """Refuse a JSON document (``head``: the input's first bytes, decompressed) given to a text edge-list reader:
    read as rows, its first line was "text after the closing quote of a quoted field". No edge list, header or
    comment starts with ``{"`` or ``[{``.

    Raises:
        DataError: naming ``path`` and the format that reads PyG Temporal's json files.
    """
    # an object's first key, or an array's first value that is a container or a string: an id may start with { or [
    if re.match(rb'\s*(\{\s*["}]|\[\s*[\[{"\]])', head.removeprefix(BOM)):
        raise DataError(f"{path}: a JSON document, not a --format {fmt} edge list: PyG Temporal's json files are "
                        "--format pygt-json (a dataset's manifest.json is no input: give its directory as data.path)")


def read_input_text(path: Path) -> str:
    """Decompressed ``path`` decoded as UTF-8 (a BOM is dropped); errors name the line."""
    return decode_input(path, read_input_bytes(path))


def decode_input(path: Path, data: bytes) -> str:
    """:func:`read_input_bytes`' ``data`` of ``path`` decoded as UTF-8 (a BOM is dropped); errors name the line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text ({e.reason})") from None


#: The UTF-8 byte order mark, which UTF-8-sig decoding drops.
BOM = b"\xef\xbb\xbf"
#: ASCII bytes that ``str.splitlines`` (the line-by-line readers') reads as line breaks and ``np.loadtxt`` does not,
#: and U+001F, which ``np.loadtxt`` strips from a field as blank while ``float()`` (the line-by-line reader of edge
#: features, which are not stripped) refuses it
_OTHER_BREAK_BYTES = (b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\x1f")


def plain_text(text: bytes) -> bool:
    r"""Whether numpy's C reader ``np.loadtxt`` splits ``text`` (whole lines) into the lines and comma-separated
    fields that the line-by-line readers (``str.splitlines``, ``str.split(",")``) find: ASCII, no ``"`` (no quoted
    field), no line break but ``\n`` and ``\r\n``, no U+001F."""
    if not text.isascii() or b'"' in text or any(b in text for b in _OTHER_BREAK_BYTES):
        return False
    return b"\r" not in text or text.count(b"\r") == text.count(b"\r\n")


class InputBytes:
    """An input's bytes for a reader of blocks of lines: a file that is neither compressed nor refused by
    :func:`read_input_bytes` is read from disk a block at a time (one block of it held, not the whole file); any
    other input is held whole, as :func:`read_input_bytes` returns it (decompressed).

    Args:
        path: the input.

    Raises:
        DataError: :func:`read_input_bytes`' errors.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: bytes | None = None
        try:
            with open(path, "rb") as f:
                head, st = f.read(TAR_HEADER), os.fstat(f.fileno())
        except OSError:
            head = st = None
        raw = st is not None and stat.S_ISREG(st.st_mode) and not head.startswith((_GZIP, _XZ, _BZ2))
        if raw:
            try:
                _check_raw(path, head)
            except DataError:
                raw = False
        if raw:
            self.size = st.st_size
        else:
            self.data = read_input_bytes(path)  # what it refuses, it refuses here, as every reader does
            self.size = len(self.data)

    def whole(self) -> bytes:
        """The whole content: :func:`read_input_bytes`'."""
        return self.data if self.data is not None else read_input_bytes(self.path)

    def take(self) -> bytes:
        """:meth:`whole`, this object keeping no copy (a reader done with it: it is not to be read again)."""
        data, self.data = self.whole(), None
        return data

    def prefix(self, n: int) -> bytes:
        """The first ``n`` bytes (fewer at the end)."""
        if self.data is not None:
            return self.data[:n]
        with open(self.path, "rb") as f:
            return f.read(n)

    def last(self) -> bytes:
        """The last byte (none for an empty input)."""
        if self.data is not None or not self.size:
            return (self.data or b"")[-1:]
        with open(self.path, "rb") as f:
            f.seek(self.size - 1)
            return f.read(1)

    def lines(self, start: int) -> int:
        r"""The ``\n`` from byte ``start`` on."""
        if self.data is not None:
            return self.data.count(b"\n", start)
        n, buf = 0, bytearray(max(1, min(1 << 22, self.size - start)))
        with open(self.path, "rb") as f:
            f.seek(start)
            while got := f.readinto(buf):
                n += buf.count(b"\n", 0, got)
        return n

    def blocks(self, start: int, first: int, size: int, longest: int | None = None) -> Iterator[memoryview | None]:
        r"""From byte ``start`` on, blocks of whole lines (an input that ends in ``\n``): the first about ``first``
        bytes, the others about ``size``. A block read from the file is a view of a buffer that the next one
        overwrites. A line of more than ``longest`` bytes (None: no limit) read from the file ends the blocks with
        None, its start read into a buffer of some ``2 * longest`` bytes at most; one of an input held whole comes as
        a block (a view, no copy)."""
        if self.data is not None:
            yield from line_blocks(self.data, start, first, size)
            return
        with open(self.path, "rb") as f:
            f.seek(start)
            buf = bytearray(2 * max(first, size))
            view = memoryview(buf)
            held, want = 0, first  # held: the start of a line, carried from the last read
            while True:
                if held + want > len(buf):  # a line longer than a block
                    if longest is not None and held > longest:
                        yield None
                        return
                    grown = bytearray(2 * (held + want))
                    grown[:held] = buf[:held]
                    buf, view = grown, memoryview(grown)
                got = f.readinto(view[held : held + want])
                if not got:
                    if held:
                        yield view[:held]
                    return
                end = held + got
                cut = buf.rfind(b"\n", 0, end) + 1
                if cut:
                    yield view[:cut]
                    buf[: end - cut] = buf[cut:end]
                held, want = end - cut if cut else end, size


def line_blocks(data: bytes, start: int, first: int = 1 << 16, size: int = 1 << 22) -> Iterator[memoryview]:
    r"""``data[start:]`` (which ends in ``\n``) in blocks of whole lines, views of ``data`` (not copies): the first
    about ``first`` bytes, the others about ``size`` (a block holds one line at least)."""
    lo, want, view = start, first, memoryview(data)
    while lo < len(data):
        hi = data.find(b"\n", min(lo + want, len(data)) - 1) + 1
        yield view[lo:hi]
        lo, want = hi, size


def leading_fields(block: bytes | memoryview, width: int, need: int) -> bytes | None:
    r"""The first ``need`` comma-separated fields of each line of ``block`` (whole ``\n``-ended lines), as lines of
    their own, where every line but the blank ones (empty or a lone ``\r``, which ``np.loadtxt`` skips as the
    line-by-line readers skip a line that strips to nothing) holds ``width`` fields; else None."""
    b = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(b == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    length = ends - starts
    full = (length > 1) | ((length == 1) & (b[starts] != ord("\r")))
    starts, ends = starts[full], ends[full]
    commas = np.flatnonzero(b == ord(","))
    if commas.shape[0] != starts.shape[0] * (width - 1):
        return None
    if not starts.shape[0]:
        return b""
    cut = ends
    if width > 1:
        # as many commas as the lines need: each line holds its share (its first and last) only if none has more
        rank = commas.reshape(-1, width - 1)
        if not (np.all(rank[:, 0] >= starts) and np.all(rank[:, -1] < ends)):
            return None
        if need < width:
            cut = rank[:, need - 1]
    size = cut - starts + 1  # each line's first fields and the separator after them
    last = np.cumsum(size) - 1
    out = b[np.repeat(starts - last + size - 1, size) + np.arange(last[-1] + 1)]
    out[last] = ord("\n")
    return out.tobytes()


#: The bytes of a block of plain decimals (:func:`decimal_fields`) but their signs
_UNSIGNED_BYTES = b"0123456789,.\n"
#: ``10**k`` as float64, exact for k <= 22
_POW10 = 10.0 ** np.arange(23)
#: Indexed by ``16 * d + v`` (``d`` the digits after a byte in its field, ``v`` its digit value, 10 for a byte that is
#: no digit): the byte's part ``v * 10**d`` of its field's integer mantissa; int32 for fields of 9 digits at most
_DIGIT_PARTS = ((10 ** np.arange(19, dtype=np.int64))[:, None] * np.r_[np.arange(10), np.zeros(6)].astype(np.int64)
                ).reshape(-1)
_DIGIT_PARTS_32 = _DIGIT_PARTS[: 16 * 10].astype(np.int32)


class Scratch:
    """Arrays reused from one block of a file to the next (:func:`decimal_fields`): a fresh array of a block's size
    is memory the allocator maps anew, whose first touch costs the kernel a page fault per 4 KiB."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype: type) -> np.ndarray:
        """An uninitialised (n,) array of ``dtype``, the one named ``name`` when it is large enough."""
        a = self._arrays.get(name)
        if a is None or a.shape[0] < n or a.dtype != dtype:
            a = self._arrays[name] = np.empty(max(n, 2 * (0 if a is None else a.shape[0])), dtype=dtype)
        return a[:n]


def decimal_fields(
    block: bytes, width: int, scratch: Scratch | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    r"""The fields of ``block`` (whole ``\n``- or ``\r\n``-ended lines of ``width`` comma-separated fields, blank lines
    skipped) as numbers, where each is a plain decimal ``[+-]digits[.digits]`` (a digit at least, 18 at most), by
    arithmetic on the bytes: no Python object and no string-to-float call per field.

    A field's mantissa m (its digits as an integer, exact in int64) and its digits after the point k give its
    value m / 10^k; where m <= 2^53 (k <= 18), m and 10^k are exact doubles and their quotient, rounded once to
    the nearest double, is what a correctly rounded reader returns (Clinger's fast path: W. D. Clinger, "How to
    read floating point numbers accurately", PLDI 1990, §4): Python's ``float()`` and numpy's readers, which
    :func:`parse_numbers` and ``np.loadtxt`` use, give the same double, -0.0 included.

    Args:
        block: the lines.
        width: the fields of a line.
        scratch: arrays to reuse for the arrays of one number per byte (a block after block read).

    Returns:
        ``(ints, floats, dotted)``, each (rows, width): the value as int64 (that of a field without a point), as
        float64, and whether the field holds a point; or None where a field is anything else (an exponent, a
        blank, ``nan``; more than 18 digits, or more than 2^53 with a point) or a line holds another number of
        fields.
    """
    if b"\r" in block:
        block = block.replace(b"\r\n", b"\n")
    if block.startswith(b"\n") or b"\n\n" in block:
        block = b"\n".join(line for line in block.split(b"\n") if line) + b"\n"
    signs = block.translate(None, _UNSIGNED_BYTES)
    if signs.translate(None, b"+-") or not block.strip(b"\n"):
        return None
    b = np.frombuffer(block, dtype=np.uint8)
    n, scratch = b.shape[0], scratch or Scratch()
    mask, other = scratch.get("mask", n, np.bool_), scratch.get("other", n, np.bool_)
    sep = np.flatnonzero(np.logical_or(np.equal(b, ord(","), out=mask), np.equal(b, ord("\n"), out=other), out=mask))
    if sep.shape[0] % width:
        return None
    rows = sep.shape[0] // width
    line = b[sep].reshape(rows, width)  # every line's separators: commas, then its newline
    if not (np.all(line[:, -1] == ord("\n")) and np.all(line[:, :-1] == ord(","))):
        return None
    size = np.diff(sep, prepend=-1)  # a field's bytes, its separator included
    starts = sep - size + 1
    value = np.subtract(b, ord("0"), out=scratch.get("value", n, np.uint8))  # any byte but a digit wraps to >= 10
    digits = np.cumsum(np.less(value, 10, out=mask), out=scratch.get("digits", n, np.int64))  # digits up to a byte
    at_end = digits[sep]
    ndig = np.diff(at_end, prepend=0)
    first = b[starts]  # a field's first byte (its separator where it is empty)
    neg = first == ord("-")
    signed = neg | (first == ord("+"))
    points = size - 1 - signed - ndig  # its bytes that are neither digits nor a leading sign
    if (not np.all((ndig >= 1) & (ndig <= 18) & (points >= 0) & (points <= 1))
            or len(signs) != np.count_nonzero(signed)):
        return None
    dotted = points.astype(bool)
    dots = np.flatnonzero(np.equal(b, ord("."), out=mask))
    if dots.shape[0] != np.count_nonzero(dotted):  # so a field's byte that is no digit nor its sign is its point
        return None
    after = np.zeros(sep.shape[0], dtype=np.int64)
    after[dotted] = at_end[dotted] - digits[dots]
    # a byte's digits after it in its field: the field's count at its end (a running sum of each field's count,
    # put at its first byte) less the count up to the byte
    key = scratch.get("key", n, np.intp)
    key.fill(0)
    key[starts] = ndig
    np.cumsum(key, out=key)
    key -= digits
    key <<= 4
    key += np.minimum(value, 10, out=value)
    # a field's mantissa: the sum of its bytes' parts, as differences of running sums (which may wrap: exact anyway)
    table = _DIGIT_PARTS_32 if ndig.max() <= 9 else _DIGIT_PARTS
    parts = np.take(table, key, out=scratch.get(f"parts{table.dtype}", n, table.dtype), mode="clip")
    mantissa = np.diff(np.cumsum(parts, dtype=np.int64, out=scratch.get("sums", n, np.int64))[sep], prepend=0)
    if np.any(dotted & (after > 0) & (mantissa > 2**53)):
        return None
    floats = mantissa / _POW10.take(after)
    floats *= 1.0 - 2.0 * neg  # -0.0 for "-0.0", as float() reads it
    ints = np.where(neg, -mantissa, mantissa)
    return ints.reshape(rows, width), floats.reshape(rows, width), dotted.reshape(rows, width)


def parse_numbers(tokens: Sequence[str], lines: Sequence[int], path: Path, what: str) -> np.ndarray:
    """Parse a column of tokens: int64 when all are integers (exact epoch/ns times), else finite float64.

    Raises:
        DataError: ``path:line: cannot parse <what> 'tok'`` for the first bad token.
    """
    try:
        return np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    try:
        arr = np.array(tokens, dtype=np.float64)
    except ValueError:
        for tok, line in zip(tokens, lines, strict=True):
            try:
                float(tok)
            except ValueError:
                raise DataError(f"{path}:{line}: cannot parse {what} {shorten(tok)!r}") from None
        raise  # unreachable: some token failed above
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{path}:{lines[i]}: {what} {shorten(tokens[i])!r} is not a finite number")
    return arr


def remap_ids(tokens: np.ndarray | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Map id tokens to 0..N-1 in sorted order: numeric when all are integers, else as strings.

    Returns:
        ``(index, vertex_ids)``: index (len(tokens),) int64 into ``vertex_ids`` (N,).
    """
    try:
        values = np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        values = np.array(tokens, dtype=str)
    vertex_ids, index = np.unique(values, return_inverse=True)
    return index.astype(np.int64).reshape(-1), vertex_ids


@dataclass(frozen=True)
class Slice:
    """Events ``[lo, hi)`` of the time-sorted event arrays form one snapshot covering ``time``."""

    lo: int
    hi: int
    time: tuple[float, float]


def _offsets(times: np.ndarray, tmin: int) -> np.ndarray:
    """``times - tmin`` exactly for sorted int64 ``times``: uint64 when the span passes 2^63, where int64 wraps."""
    if int(times[-1]) - tmin < 2**63:
        return times - np.int64(tmin)
    return times.view(np.uint64) - np.uint64(tmin % 2**64)  # modulo 2^64: exact, as the result is in [0, 2^64)


def _exact_index(offset: np.ndarray, num: int, den: int) -> np.ndarray:
    """``floor(offset * num / den)`` exactly for non-negative int64 or uint64 ``offset``."""
    if int(offset.max(initial=0)) * num < 2**62:
        return offset * np.int64(num) // np.int64(den)
    # nanoseconds over years overflow int64 when multiplied by T: Python ints are exact
    return np.array([o * num // den for o in offset.tolist()], dtype=np.int64)


def _check_count(path: Path, T: int) -> None:
    if T > MAX_SNAPSHOTS:
        raise DataError(
            f"{path}: this slicing makes {T if T < 10**12 else f'{float(T):.3g}'} snapshots (limit {MAX_SNAPSHOTS});"
            " use fewer --snapshots or a larger --window"
        )


def slice_events(
    times: np.ndarray,
    path: Path,
    *,
    snapshots: int | None = None,
    window: float | None = None,
    events_per_snapshot: int | None = None,
) -> list[Slice]:
    """Cut stably time-sorted events into snapshots; exactly one of ``snapshots`` (T equal slices),
    ``window`` (duration S) or ``events_per_snapshot`` (K events each). Rules: :mod:`.snap`.

    Raises:
        DataError: no events, a non-positive parameter, all events at one time with T > 1,
            or more than :data:`MAX_SNAPSHOTS` windows.
    """
    given = [x is not None for x in (snapshots, window, events_per_snapshot)]
    if sum(given) != 1:
        raise DataError(f"{path}: give exactly one of --snapshots, --window, --events-per-snapshot")
    n = int(times.shape[0])
    if n == 0:
        raise DataError(f"{path}: no events")
    if events_per_snapshot is not None:
        k = int(events_per_snapshot)
        if k < 1:
            raise DataError(f"{path}: --events-per-snapshot must be >= 1 (got {events_per_snapshot})")
        # closed [first, last] times: with ties a half-open range could not be disjoint
        return [
            Slice(lo, min(lo + k, n), (float(times[lo]), float(times[min(lo + k, n) - 1]))) for lo in range(0, n, k)
        ]
    tmin, tmax = times[0], times[-1]
    integer = times.dtype.kind == "i"
    if not np.isfinite(float(tmax) - float(tmin)):  # e.g. times of +-1e300: every slice index would be NaN
        raise DataError(f"{path}: the time span {float(tmin):g} .. {float(tmax):g} overflows a float; "
                        "rescale the time column")
    if snapshots is not None:
        T = int(snapshots)
        if T < 1:
            raise DataError(f"{path}: --snapshots must be >= 1 (got {snapshots})")
        _check_count(path, T)
        if tmax == tmin and T > 1:
            raise DataError(
                f"{path}: all events share one timestamp ({tmin}); use --snapshots 1 or --events-per-snapshot"
            )
        if T == 1:
            idx = np.zeros(n, dtype=np.int64)
        elif integer:
            idx = _exact_index(_offsets(times, int(tmin)), T, int(tmax) - int(tmin))
        else:
            idx = np.floor((times - tmin) * float(T) / float(tmax - tmin)).astype(np.int64)
        np.clip(idx, 0, T - 1, out=idx)  # t = tmax lands in slice T-1 (the last slice is closed)
        span = float(int(tmax) - int(tmin)) if integer else float(tmax - tmin)
        bounds = [(float(tmin) + k * span / T, float(tmin) + (k + 1) * span / T) for k in range(T)]
        bounds[-1] = (bounds[-1][0], float(tmax))
    else:
        S = float(window)
        if not S > 0 or not np.isfinite(S):
            raise DataError(f"{path}: --window must be a positive number of time units (got {window})")
        count = (float(tmax) - float(tmin)) / S  # before any cast: a tiny window overflows int64 (negative T)
        if not np.isfinite(count) or count >= MAX_SNAPSHOTS:
            _check_count(path, MAX_SNAPSHOTS + 1 if not np.isfinite(count) else int(count) + 1)
        if integer and S > int(tmax) - int(tmin):  # one slice; such an S may not fit in int64
            idx = np.zeros(n, dtype=np.int64)
        elif integer:
            offset = _offsets(times, int(tmin))
            if S.is_integer():
                idx = (offset // offset.dtype.type(int(S))).astype(np.int64)
            else:
                idx = np.floor(offset / S).astype(np.int64)
        else:
            idx = np.floor((times - tmin) / S).astype(np.int64)
        T = int(idx[-1]) + 1
        _check_count(path, T)
        bounds = [(float(tmin) + k * S, float(tmin) + (k + 1) * S) for k in range(T)]
    # sorted times give non-decreasing slice indices: a cumulative count gives the ranges
    offsets = np.zeros(T + 1, dtype=np.int64)
    np.cumsum(np.bincount(idx, minlength=T), out=offsets[1:])
    return [Slice(int(offsets[k]), int(offsets[k + 1]), bounds[k]) for k in range(T)]


def with_next_activity(snapshots: Iterable[RawSnapshot], num_vertices: int) -> Iterator[RawSnapshot]:
    """Label v at t with 1 if v touches an edge of t+1, else 0 (last snapshot: -1), buffering one snapshot."""
    it = iter(snapshots)
    prev = next(it, None)
    if prev is None:
        return
    for cur in it:
        labels = np.zeros(num_vertices, dtype=np.int64)
        labels[np.asarray(cur.src, dtype=np.int64)] = 1
        labels[np.asarray(cur.dst, dtype=np.int64)] = 1
        yield replace(prev, labels=labels)
        prev = cur
    yield replace(prev, labels=np.full(num_vertices, -1, dtype=np.int64))


def next_degree(src: np.ndarray, dst: np.ndarray, num_vertices: int) -> np.ndarray:
    """Distinct neighbours of every vertex, direction ignored (so ``--undirected`` agrees), as float64 (N,)."""
    n = np.int64(num_vertices)
    s, d = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    keys = unique_ints(np.concatenate([s * n + d, d * n + s]))
    return np.bincount(keys // n, minlength=num_vertices).astype(np.float64)


def with_next_degree(snapshots: Iterable[RawSnapshot], num_vertices: int, log: bool) -> Iterator[RawSnapshot]:
    """Attach :func:`next_degree` of snapshot t+1 (log1p with ``log``) as float targets; the last is NaN."""
    it = iter(snapshots)
    prev = next(it, None)
    if prev is None:
        return
    for cur in it:
        y = next_degree(cur.src, cur.dst, num_vertices)
        yield replace(prev, targets=np.log1p(y) if log else y)
        prev = cur
    yield replace(prev, targets=np.full(num_vertices, np.nan))


# --------------------------------------------------------------------------- --columns

#: ``--columns`` keys, in the order they are listed in messages.
COLUMN_KEYS = ("src", "dst", "time", "label", "weight")

#: Keys every ``--columns`` mapping must give.
REQUIRED_COLUMNS = ("src", "dst", "time")

#: Header names recognised without ``--columns`` (lower case): JODIE's, TGL/TGN's and plain edge-list names.
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "src": ("user_id", "user", "u", "src", "source", "from"),
    "dst": ("item_id", "item", "i", "dst", "destination", "target", "to"),
    "time": ("timestamp", "ts", "time", "t"),
    "label": ("state_label", "label", "state"),
    "weight": ("weight", "w", "rating"),
}


def parse_columns(spec: str, path: Path, allowed: Sequence[str], fmt: str) -> dict[str, str]:
    """Parse ``--columns src=A,dst=B,time=C[,...]`` into ``{key: column}``, checked before the input is read.

    Raises:
        DataError: ``path: --columns ...`` naming the offending key.
    """
    keys = ", ".join(allowed)
    out: dict[str, str] = {}
    for item in spec.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise DataError(f"{path}: --columns: {item.strip()!r} is not KEY=COLUMN (keys for --format {fmt}: {keys})")
        if key not in allowed:
            raise DataError(f"{path}: --columns: unknown key {key!r} for --format {fmt}; keys are {keys}")
        if key in out:
            raise DataError(f"{path}: --columns: key {key!r} given twice")
        out[key] = value
    for key in REQUIRED_COLUMNS:
        if key not in out:
            raise DataError(f"{path}: --columns: missing key {key!r} ({', '.join(REQUIRED_COLUMNS)} are required)")
    return out


def split_fields(line: str, comma: bool, path: Path, lineno: int) -> list[str]:
    """Fields of line ``lineno`` of ``path``: comma-separated (each stripped, empty fields kept) or
    whitespace-separated; a field quoted with ``"`` is read without its quotes (:func:`quoted_fields`).

    Raises:
        DataError: :func:`quoted_fields`'s, for a line holding a ``"``.
    """
    if '"' in line:
        return quoted_fields(line, "," if comma else " ", path, lineno)
    return [f.strip() for f in line.split(",")] if comma else line.split()


#: a quoted field from its opening quote to its closing one; ``""`` inside stands for one ``"`` (csv's escape)
_QUOTED = re.compile(r'"([^"]*(?:""[^"]*)*)"(?!")')
#: per ``sep`` of :func:`quoted_fields`: the blanks before a field (",") or the separator between two, and an
#: unquoted field ("," finds the next comma)
_SEPARATOR = {",": re.compile(r"[ \t]*"), " ": re.compile(r"\s*"), ", ": re.compile(r"[\s,]*")}
_UNQUOTED = {" ": re.compile(r"\S+"), ", ": re.compile(r"[^\s,]+")}
#: per ``sep``: a line whose every ``"`` opens or closes a field that holds no ``"`` (nor a separator, nor nothing
#: where runs of whitespace separate): dropping its quotes leaves its fields, split at C speed
_PLAIN_QUOTES = {
    ",": re.compile(r'(?:[ \t]*"[^",]*"[ \t]*|[^",]*)(?:,(?:[ \t]*"[^",]*"[ \t]*|[^",]*))*'),
    " ": re.compile(r'(?:"[^"\s]+"|[^"\s]+)(?:\s+(?:"[^"\s]+"|[^"\s]+))*'),
    ", ": re.compile(r'(?:"[^"\s,]+"|[^"\s,]+)(?:[\s,]+(?:"[^"\s,]+"|[^"\s,]+))*'),
}


def quoted_fields(line: str, sep: str, path: Path, lineno: int) -> list[str]:
    """The fields of line ``lineno`` of ``path`` where a field may be quoted with ``"``, as csv writers quote
    (pandas' ``QUOTE_ALL`` or ``QUOTE_NONNUMERIC``, spreadsheet exports): a field that starts with ``"`` (after
    blanks) ends at the next ``"`` not doubled, ``""`` inside stands for ``"``, and its value is what is between,
    stripped; a ``"`` inside an unquoted field is text. Numbers and ids are never read across lines, so a quoted
    field ends on its own line.

    Args:
        line: the line, stripped.
        sep: ``","``: each comma separates (empty fields kept, as :func:`split_fields`); ``" "``: runs of
            whitespace; ``", "``: runs of commas and whitespace (a SNAP edge list's ``src dst time``).
        path: the file, for the message.
        lineno: the line's number, for the message.

    Raises:
        DataError: ``path:line``: a quote that does not close on its line, or text after a closing quote.
    """
    # Not csv.reader: strict, it refuses blanks after a closing quote (`"2" ,3`, which pandas reads); lax, it
    # joins `"2"x` into `2x`; either way a quote after a tab is text and its errors give no position.
    if _PLAIN_QUOTES[sep].fullmatch(line):  # pandas' QUOTE_ALL and QUOTE_NONNUMERIC rows of numbers
        plain = line.replace('"', "")
        if sep == ",":
            return [f.strip() for f in plain.split(",")]
        return (plain.replace(",", " ") if sep == ", " else plain).split()
    fields: list[str] = []
    n, pos = len(line), 0
    comma = sep == ","
    skip = _SEPARATOR[sep]
    while True:
        pos = skip.match(line, pos).end()
        if pos == n and not comma:
            return fields
        if pos < n and line[pos] == '"':
            m = _QUOTED.match(line, pos)
            if m is None:
                raise DataError(f"{path}:{lineno}: a quoted field does not close: no '\"' after the one at character "
                                f"{pos + 1} of {shorten(line)!r} (a field is read from one line)")
            fields.append(m.group(1).replace('""', '"').strip())
            pos = skip.match(line, m.end()).end() if comma else m.end()
            if pos < n and not (line[pos] == "," if comma else line[pos].isspace() or line[pos] in sep):
                raise DataError(f"{path}:{lineno}: text after the closing '\"' of a quoted field at character "
                                f"{pos + 1} of {shorten(line)!r}; quote a field whole or not at all")
        elif comma:
            end = line.find(",", pos)
            end = n if end < 0 else end
            fields.append(line[pos:end].strip())
            pos = end
        else:
            m = _UNQUOTED[sep].match(line, pos)
            fields.append(m.group())
            pos = m.end()
        if comma:
            if pos >= n:
                return fields
            pos += 1  # the comma


#: a quoted field as :func:`quoted_fields` reads one: its ``"`` opens at the line's start or after a blank or comma
_FIELD_QUOTE = re.compile(r'(?<![^\s,])' + _QUOTED.pattern)


def comma_separated(line: str) -> bool:
    """Whether ``line`` separates its fields by commas: it holds a comma outside its quoted fields (a comma inside
    one, ``"a,b" 2 5``, is part of an id of a whitespace-separated line, as :func:`quoted_fields` reads it)."""
    if "," not in line:
        return False
    return '"' not in line or "," in _FIELD_QUOTE.sub("", line)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def looks_like_header(first: Sequence[str], second: Sequence[str] | None) -> bool:
    """Whether ``first`` is a header: some field is non-numeric where the next line's is numeric."""
    if second is None:
        return False
    return any(not _is_number(a) and _is_number(b) for a, b in zip(first, second, strict=False))


def note_numbered_first_line(path: Path, lineno: int, fields: Sequence[str]) -> None:
    """Warn that the first line ``lineno``, read as data, is also what pandas writes as the header of unnamed
    columns (``DataFrame.to_csv(index=False)`` of a frame built from arrays: ``0,1,2``).

    Such a line is ambiguous, and stays data in every reader (numpy's and the line-by-line one, snap's and jodie's
    by index): by each format's rules a line of numbers is a row, and a first event skipped as a header would be
    lost without a word; added without one, an event the user took for a header (0 -> 1 at time 2) would be
    too. So it is kept and said once, naming the line, for the user to remove if it is a header.

    Args:
        path: the input, for the line.
        lineno: the first data line's number.
        fields: its fields (unquoted).
    """
    names = [f.strip() for f in fields]
    if len(names) >= 3 and names == [str(i) for i in range(len(names))]:
        print(f"hpcdgnn prepare: warning: {path}:{lineno}: {','.join(names)} is read as data, an event, though "
              "pandas writes it as the header of unnamed columns (DataFrame.to_csv): if it is one, remove that line",
              file=sys.stderr, flush=True)


def check_header_width(path: Path, header: Sequence[str] | None, lineno: int, width: int) -> None:
    """Refuse a header read by name that names another number of columns than the rows hold (``width`` fields at
    line ``lineno``): a column missing or extra before a named one reads each under its neighbour's name (ids as
    times), one after drops a named column (a feature) or reads the label as a feature.

    Raises:
        DataError: both counts, the header's and line ``lineno``'s.
    """
    if header is None or len(header) == width:
        return
    raise DataError(f"{path}:{lineno}: {width} fields, but the header names {len(header)} "
                    f"({describe_header(header)}); read by name, columns would be taken from their neighbours or "
                    "dropped: make the header and the rows agree (or map the columns with --columns by 0-based index)")


def read_by_name(columns: dict[str, str] | None) -> bool:
    """Whether a file's columns are found by the header's names (no ``--columns``, or one naming a column),
    not by 0-based index."""
    return columns is None or any(not v.isdigit() for v in columns.values())


class RowWidths:
    """The width of a file's rows, the first data row's: checked against a header read by name (``check(lineno,
    width)``, e.g. :func:`check_header_width`; None where columns go by index), and every later row held to it —
    a row of another width (a truncated last line, a field missing) has its columns moved, and read by position
    one column would be read as another.

    Raises:
        DataError: ``check``'s, or a row of another width (its line, and the first row's).
    """

    def __init__(self, path: Path, check: Callable[[int, int], None] | None = None, unit: str = "fields") -> None:
        self.path, self.check, self.unit = path, check, unit
        self.width = self.first = 0

    def see(self, lineno: int, width: int) -> bool:
        """Hold line ``lineno``'s ``width`` fields to the first row's; True for the first row."""
        if not self.width:
            self.width, self.first = width, lineno
            if self.check is not None:
                self.check(lineno, width)
            return True
        if width != self.width:
            raise DataError(f"{self.path}:{lineno}: expected {self.width} {self.unit} like line {self.first}, "
                            f"got {width}")
        return False


def _last_field(line: str) -> str:
    """The last comma- or whitespace-separated field of a stripped line."""
    return line[max(line.rfind(","), line.rfind(" "), line.rfind("\t")) + 1 :].strip()


class LastLine:
    """Watches a text file's data rows for a last line cut short: an interrupted download or copy ends a plain
    file mid-line, without its newline, and a number cut mid-digits still parses (``105 8 1082654`` for
    ``105 8 1082654017``) as a wrong event. Compressed inputs are checked by their decompressors instead.

    Iterate over it in place of ``rows``; after the last row, :meth:`check` refuses or warns.

    Args:
        path: the input, for messages.
        text: the whole decoded file (only its end is kept).
        rows: ``(line number, stripped line)`` of the data rows, the header excluded.
    """

    def __init__(self, path: Path, text: str, rows: Iterable[tuple[int, str]]) -> None:
        self.path, self.rows = path, rows
        cut = bool(text) and text[-1] not in "\n\r"
        # the file's final line, when no newline ends it (None else)
        self.final = text[max(text.rfind("\n"), text.rfind("\r")) + 1 :].strip() if cut else None
        self.shortest: int | None = None  # the shortest last field of every row but the latest
        self.last: tuple[int, str] | None = None

    def __iter__(self) -> Iterator[tuple[int, str]]:
        if self.final is None:  # a newline ends the file: nothing to watch
            yield from self.rows
            return
        for lineno, s in self.rows:
            if self.last is not None:
                n = len(_last_field(self.last[1]))
                self.shortest = n if self.shortest is None else min(self.shortest, n)
            self.last = (lineno, s)
            yield lineno, s

    def check(self, time_order_broken: bool = False) -> None:
        """After the last row: refuse a last line that ends the file without a newline and looks cut — its last
        field shorter than every other row's (a number that lost digits), or ``time_order_broken`` (its time, the
        last field, is before the row above while every other row is in time order) — and warn of one that
        does not look cut, since nothing can tell it whole.

        Raises:
            DataError: ``path:line`` with the line, why it looks cut, and the way out.
        """
        if self.final is None or self.last is None or self.last[1] != self.final:
            return  # a newline ends the file, or its final line is a comment
        check_unterminated_line(self.path, *self.last, self.shortest, time_order_broken)


def check_unterminated_line(path: Path, lineno: int, line: str, shortest: int | None,
                            time_order_broken: bool = False) -> None:
    """:meth:`LastLine.check` for a file whose final line ``line`` (number ``lineno``, a data row) ends it
    without a newline; ``shortest`` the shortest last field of the other rows (None: no other row).

    Raises:
        DataError: ``path:line`` with the line, why it looks cut, and the way out.
    """
    where = f"{path}:{lineno}: the file ends without a newline after {shorten(line)!r}"
    why = None
    if shortest is not None and len(_last_field(line)) < shortest:
        why = f"its last field has fewer characters than every other row's ({shortest} or more)"
    elif time_order_broken:
        why = "its time is before the row above, in a file otherwise in time order"
    if why is not None:
        raise DataError(f"{where}, and {why}: the file looks cut short (an interrupted download or copy); "
                        "fetch it again, or, if that line is whole, end the file with a newline")
    print(f"hpcdgnn prepare: warning: {where}: if the file was cut short, that row is wrong; check the file's "
          "size against its source", file=sys.stderr, flush=True)


#: Field separators of spreadsheet and database exports (a locale whose decimal mark is a comma writes ``;``) that
#: neither text reader splits on, with how messages name them and write them for ``tr``.
_OTHER_SEPARATORS = ((";", "semicolons", ";"), ("|", "'|'", "|"), ("\t", "tabs", "\\t"))


def check_separator(path: Path, lineno: int, fields: Sequence[str], fmt: str, reads: str) -> None:
    """Refuse line ``lineno``, read as the one field ``fields``, when it holds three or more fields split by a
    separator the reader does not split on (:data:`_OTHER_SEPARATORS`): else it is reported as one column, or as a
    header without the names ``--columns`` then cannot find either.

    Args:
        path: the input, as messages name it.
        lineno: the line's number.
        fields: the fields the reader found in the line.
        fmt: the ``--format`` reading it.
        reads: the separators it reads, as the message says them.

    Raises:
        DataError: naming the line, the separator and how to convert the file.
    """
    if len(fields) != 1:
        return
    for sep, name, shown in _OTHER_SEPARATORS:
        parts = fields[0].split(sep)
        if len(parts) >= 3:
            raise DataError(
                f"{path}:{lineno}: fields separated by {name} ({describe_header([p.strip() for p in parts])}), but "
                f"--format {fmt} reads {reads}: convert the file first, e.g. tr '{shown}' ',' < IN > OUT (where no "
                "field holds a comma)"
            )


def last_breaks_order(time: np.ndarray) -> bool:
    """Whether the last of ``time`` (file order) is before the one above while all the others are in order."""
    return bool(time.shape[0] > 1 and time[-1] < time[-2] and not np.any(time[1:-1] < time[:-2]))


def describe_header(names: Sequence[str], limit: int = 8) -> str:
    """``'u', 'i', 'ts', ... (176 columns)``: the header as found, shortened for a one-line error."""
    shown = ", ".join(repr(shorten(n)) for n in names[:limit])
    more = f", ... ({len(names)} columns)" if len(names) > limit else f" ({len(names)} columns)"
    return shown + more


def _clean_name(name: str) -> str:
    return name.strip().strip('"').strip()


def guess_columns(header: Sequence[str], keys: Sequence[str]) -> dict[str, int]:
    """Columns of ``header`` named by a known alias of one of ``keys``; an ambiguous key is left out."""
    names = [_clean_name(h).lower() for h in header]
    out: dict[str, int] = {}
    for key in keys:
        hits = [i for i, n in enumerate(names) if n in COLUMN_ALIASES[key]]
        if len(hits) == 1:
            out[key] = hits[0]
    return out


def resolve_columns(spec: dict[str, str], header: Sequence[str] | None, path: Path, lineno: int) -> dict[str, int]:
    """``{key: column index}``: a value is a header name (exact, then case-insensitive), else a 0-based index.

    Raises:
        DataError: an unknown name, an index past the header, a name without a header, a shared column.
    """
    names = None if header is None else [_clean_name(h) for h in header]
    out: dict[str, int] = {}
    for key, value in spec.items():
        index: int | None = None
        if names is not None:
            exact = [i for i, n in enumerate(names) if n == value]
            if not exact:
                exact = [i for i, n in enumerate(names) if n.lower() == value.lower()]
            if len(exact) > 1:
                raise DataError(
                    f"{path}:{lineno}: --columns {key}={value}: the header has {len(exact)} columns of that name;"
                    f" use its 0-based index"
                )
            if exact:
                index = exact[0]
        if index is None and value.isdigit():
            index = int(value)
            if names is not None and index >= len(names):
                raise DataError(
                    f"{path}:{lineno}: --columns {key}={value}: the header has {len(names)} columns"
                    f" (0..{len(names) - 1})"
                )
        if index is None:
            if names is None:
                raise DataError(
                    f"{path}:{lineno}: --columns {key}={value}: this file has no header line, so columns are"
                    " 0-based indices"
                )
            raise DataError(
                f"{path}:{lineno}: --columns {key}={value}: no such column; the header has {describe_header(names)}"
            )
        for other, j in out.items():
            if j == index:
                raise DataError(f"{path}:{lineno}: --columns: {other} and {key} both map to column {index}")
        out[key] = index
    return out


# --------------------------------------------------------------------------- stored edges per snapshot


def stored_edges_per_slice(
    src: np.ndarray, dst: np.ndarray, n: int, slices: Sequence[Slice], undirected: bool, window: int = 1
) -> tuple[list[int], list[int]]:
    """Edges and adjacency entries the writer will store per snapshot, from one sort of all events.

    Counts the writer's dedupe and the union pattern of ``window`` snapshots (edge-life /
    M-transform; positive weights never cancel) without building a snapshot, so the size
    estimate is exact before anything is written.

    Returns:
        ``(edges, nnz)``: per snapshot, the manifest's ``snapshot_edges`` and ``snapshot_nnz``.
    """
    T = len(slices)
    if T == 0:
        return [], []
    sizes = np.array([s.hi - s.lo for s in slices], dtype=np.int64)
    lo = slices[0].lo
    s = np.asarray(src[lo : lo + int(sizes.sum())], dtype=np.int64)
    d = np.asarray(dst[lo : lo + int(sizes.sum())], dtype=np.int64)
    sid = np.repeat(np.arange(T, dtype=np.int64), sizes)
    if undirected:
        a, b = np.minimum(s, d), np.maximum(s, d)
        keys, per_pair = a * np.int64(n) + b, np.where(a == b, 1, 2)
    else:
        keys, per_pair = s * np.int64(n) + d, np.ones(s.shape[0], dtype=np.int64)
    order = np.lexsort((sid, keys))  # by key, then snapshot: a key's occurrences in time order
    ks, ss = keys[order], sid[order]
    first = np.ones(ks.shape[0], dtype=bool)
    if first.size:
        first[1:] = (ks[1:] != ks[:-1]) | (ss[1:] != ss[:-1])
    uk, us, uw = ks[first], ss[first], per_pair[order][first]
    edges = np.bincount(us, weights=uw, minlength=T)
    # a key seen at s is in A_t for t in [s, s + window), cut at its next occurrence: disjoint intervals
    nxt = np.full(uk.shape[0], T, dtype=np.int64)
    if uk.size > 1:
        same = uk[1:] == uk[:-1]
        nxt[:-1] = np.where(same, us[1:], T)
    end = np.minimum(np.minimum(us + window, nxt), T)
    diff = np.bincount(us, weights=uw, minlength=T + 1) - np.bincount(end, weights=uw, minlength=T + 1)
    nnz = np.cumsum(diff)[:T]
    return [int(c) for c in edges], [int(c) for c in nnz]


def concat_snapshots(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, list[Slice]]:
    """Per-snapshot edge arrays as one event stream with its slices (for :func:`stored_edges_per_slice`)."""
    sizes = [int(np.asarray(p[0]).shape[0]) for p in parts]
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    src = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts]) if parts else np.zeros(0, np.int64)
    dst = np.concatenate([np.asarray(p[1], dtype=np.int64) for p in parts]) if parts else np.zeros(0, np.int64)
    return src, dst, [Slice(int(bounds[k]), int(bounds[k + 1]), (0.0, 0.0)) for k in range(len(parts))]
