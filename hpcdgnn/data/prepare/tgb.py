"""The Temporal Graph Benchmark's link-prediction datasets (``tgbl-*``) as event streams with their fixed
evaluation negatives (issue 60 item 3): ``python -m hpcdgnn prepare DIR --format tgb --output OUT``.

TGB (Huang et al., NeurIPS 2023; ``shenyangHuang/TGB``, ``tgb/linkproppred/dataset.py``) keeps a dataset in a
directory ``tgbl_NAME/`` (what ``LinkPropPredDataset(name, root)`` downloads) holding ``tgbl-NAME_edgelist[_v2].csv``
and the validation and test negatives ``tgbl-NAME_{val,test}_ns[_v2].pkl``: pickled dicts (src, dst, t) -> the
negative destinations of that positive, in TGB's node ids. They are read here as TGB reads them
(``tgb/utils/pre_process.py``), so ids, times, the split and the negatives are TGB's:

* wiki, subreddit, uci, enron, lastfm (``load_edgelist_wiki``; JODIE's ``user_id,item_id,timestamp,state_label,
  features...``): src = user, dst = item + max(user) + 1 (bipartite, S = max(user) + 1), t = int(timestamp),
  edge features = the feature columns;
* coin, review (``csv_to_pd_data_sc``; ``time,src,dst,weight``): ids numbered in first-seen order, a row's src
  before its dst, one id space; t = int(time); one edge feature log2(weight), a weight of 0 read as 1;
* the split at TGB's time quantiles: train t <= q(0.70), validation q(0.70) < t <= q(0.85), test after.

Evaluation then ranks each validation and test positive against its own fixed negatives with TGB's MRR
(``tgb/linkproppred/evaluate.py``: rank = (#negatives above + #negatives at or above) / 2 + 1).
"""

from __future__ import annotations

import csv
import pickle
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from hpcdgnn.data.events import DEFAULT_SHARD_EVENTS, EventManifest, write_events
from hpcdgnn.data.prepare._common import check_unterminated_line, shorten
from hpcdgnn.data.prepare.event_stream import check_shard_events_and_time_unit
from hpcdgnn.errors import DataError

__all__ = ["prepare_tgb", "read_tgb"]

#: datasets read with ``load_edgelist_wiki`` (bipartite JODIE csv)
_JODIE_LIKE = ("wiki", "subreddit", "uci", "enron", "lastfm")
#: datasets read with ``csv_to_pd_data_sc`` (time, src, dst, weight; first-seen ids)
_WEIGHTED = ("coin", "review")
#: TGB's validation and test fractions (``generate_splits``)
_VAL, _TEST = 0.15, 0.15
#: :func:`_ends_in_quote`'s states: a field's start, an unquoted field, a quoted one, a quote inside a quoted one
_START, _FIELD, _QUOTED, _QUOTE_IN_QUOTED = range(4)


class _NumpyOnly(pickle.Unpickler):
    """Unpickles dicts, tuples, numbers and numpy arrays only: a pickle from elsewhere cannot run code."""

    _ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
                ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"), ("numpy.core.numeric", "_frombuffer"),
                ("numpy._core.numeric", "_frombuffer"), ("builtins", "tuple"), ("builtins", "dict")}

    def find_class(self, module: str, name: str):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a numpy array or number")


def _files(root: Path) -> tuple[str, Path, Path, Path]:
    """(short name, edge list, validation negatives, test negatives) of a TGB dataset directory."""
    found = sorted(root.glob("tgbl-*_edgelist*.csv"))
    if not found:
        raise DataError(f"{root}: no tgbl-NAME_edgelist[_v2].csv here; give TGB's dataset directory (e.g. "
                        "datasets/tgbl_wiki)")
    edges = found[-1]
    stem, _, suffix = edges.stem.partition("_edgelist")
    name = stem.removeprefix("tgbl-")
    val, test = (root / f"{stem}_{s}_ns{suffix}.pkl" for s in ("val", "test"))
    for path in (val, test):
        if not path.is_file():
            raise DataError(f"{path}: missing; TGB's negatives file of {stem} (download it with the dataset)")
    if name not in _JODIE_LIKE + _WEIGHTED:
        raise DataError(f"{edges}: tgbl-{name} is not read yet (supported: "
                        f"{', '.join('tgbl-' + x for x in _JODIE_LIKE + _WEIGHTED)})")
    return name, edges, val, test


def _time(token: str) -> int:
    """TGB's ``int(timestamp)``, as a ValueError where int64 cannot hold it (inf, NaN, 1e30)."""
    t = float(token)
    if not -(2.0**63) <= t < 2.0**63:
        raise ValueError(f"timestamp {shorten(token)!r} is not an int64 time")
    return int(t)


def _edges(name: str, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, list[str]]:
    """(src, dst, t, features, N, S, feature names) in TGB's ids and file order, read row by row into typed
    arrays (a tgbl file has up to tens of millions of rows)."""
    ids: dict[str, int] = {}
    src, dst, t = array("q"), array("q"), array("q")
    feat = array("f")
    width = None
    line = 0  # the last physical line of the row read last
    last: list[str] | None = None
    shortest: int | None = None  # the shortest last field of every row but the latest (a cut last line: below)
    start = 1  # the first physical line of the row read last
    held: list[str] = []  # the physical lines read since the row before
    row_lines: list[str] = []  # those of the row read last
    try:
        with open(path, newline="") as f:
            # not strict: text after a closing quote joins the field (`"2" ,3` reads '2 ', then 2), as pandas'
            # C parser (load_edgelist_wiki's read_csv) and csv.reader's default (csv_to_pd_data_sc) read it;
            # strict refused the line. A quote that never closes is pandas' error ("EOF inside string"): it
            # swallows the rest of the file into the last row, whose lines are checked (_unclosed).
            rows = csv.reader(_kept(f, held))
            next(rows, None)  # TGB skips the header line
            line = rows.line_num
            held.clear()
            for r in rows:
                start, line = line + 1, rows.line_num  # a quoted field may span lines
                row_lines = held.copy()
                held.clear()
                if last:
                    n = len(last[-1].strip())
                    shortest = n if shortest is None else min(shortest, n)
                last = r
                if name in _JODIE_LIKE:  # user_id,item_id,timestamp,state_label,features...
                    if width is None:
                        width = len(r)
                    if len(r) != width or width < 4:
                        raise ValueError(f"line {line} has {len(r)} columns, expected {width} >= 4")
                    for col, v in (("user_id", int(r[0])), ("item_id", int(r[1]))):
                        if v < 0:  # the writer would name its output, not this file
                            raise DataError(f"{path}: line {line}: negative {col} {v}")
                    src.append(int(r[0]))
                    dst.append(int(r[1]))
                    t.append(_time(r[2]))
                    feat.extend(float(x) for x in r[4:])
                else:  # time,src,dst,weight: first-seen ids, a row's source before its destination
                    src.append(ids.setdefault(r[1], len(ids)))
                    dst.append(ids.setdefault(r[2], len(ids)))
                    t.append(_time(r[0]))
                    w = float(r[3])
                    feat.append(float(np.log2(1.0 if w == 0 else w)))
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable ({e})") from None
    except csv.Error as e:  # raised before the row is returned: it starts on the line after the previous row
        _unclosed(path, name, line + 1, held, "within csv's field size limit")
        raise DataError(f"{path}: line {line + 1}: not TGB's tgbl-{name} edge list ({shorten(str(e), 120)})") from None
    except (ValueError, IndexError, OverflowError) as e:  # OverflowError: an id past int64
        _unclosed(path, name, start, row_lines)  # the rows it swallowed read as one field
        raise DataError(f"{path}: line {line}: not TGB's tgbl-{name} edge list ({shorten(str(e), 120)})") from None
    _unclosed(path, name, start, row_lines)
    if not src:
        raise DataError(f"{path}: no events after the header")
    if last and not _ends_in_newline(path):
        check_unterminated_line(path, line, ",".join(last), shortest)
    s_, d_, t_ = (np.frombuffer(a, dtype=np.int64) for a in (src, dst, t))
    f_ = np.frombuffer(feat, dtype=np.float32).reshape(len(src), -1)
    if name in _JODIE_LIKE:  # items after the users: bipartite, S = max(user) + 1
        s = int(s_.max()) + 1
        d_ = d_ + s
        return s_, d_, t_, f_, int(d_.max()) + 1, s, [f"f{i}" for i in range(f_.shape[1])]
    return s_, d_, t_, f_, len(ids), len(ids), ["log2_weight"]


def _kept(lines: Iterable[str], held: list[str]) -> Iterator[str]:
    """``lines``, each also appended to ``held`` (the caller clears it per row)."""
    for line in lines:
        held.append(line)
        yield line


def _unclosed(path: Path, name: str, lineno: int, lines: list[str], until: str = "before the end of the file") -> None:
    """Refuse a row (``lines``, from line ``lineno``) that ends inside a quoted field (:func:`_ends_in_quote`).

    Raises:
        DataError: ``path: line lineno``, where the quote opens (pandas' "EOF inside string").
    """
    if lines and _ends_in_quote("".join(lines)):
        raise DataError(f"{path}: line {lineno}: not TGB's tgbl-{name} edge list (a quoted field opened on this "
                        f"line does not close {until})")


def _ends_in_quote(text: str) -> bool:
    """Whether csv ``text`` (one row's physical lines) ends inside a quoted field, as pandas' C tokenizer and
    csv.reader (not strict) read it: a ``"`` at a field's start opens a quoted field, ``""`` inside one stands for
    ``"``, and after its closing quote the field goes on unquoted to the next comma or line end."""
    state = _START
    for c in text:
        if state == _QUOTED:
            state = _QUOTE_IN_QUOTED if c == '"' else _QUOTED
        elif state == _QUOTE_IN_QUOTED and c == '"':
            state = _QUOTED
        elif c in ",\r\n":
            state = _START
        else:
            state = _QUOTED if state == _START and c == '"' else _FIELD
    return state == _QUOTED


def _ends_in_newline(path: Path) -> bool:
    """Whether the last byte of the (non-empty) file ``path`` ends a line."""
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1) in (b"\n", b"\r")


def _triple(key) -> tuple[int, int, int]:
    """A pickle key as the (src, dst, t) of integers TGB stores; TypeError or ValueError otherwise (a string too:
    "123" would read as (1, 2, 3))."""
    if not isinstance(key, (tuple, list)):
        raise TypeError(key)
    out = tuple(int(x) for x in key)
    if len(out) != 3:
        raise ValueError(key)
    return out


def _negatives(path: Path, src: np.ndarray, dst: np.ndarray, t: np.ndarray,
               n: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, dst) of each event (src[i], dst[i], t[i])'s negatives in ``path``'s dict."""
    try:
        with open(path, "rb") as f:
            table = _NumpyOnly(f).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise DataError(f"{path}: not TGB's negatives pickle ({e})") from None
    if not isinstance(table, dict):
        raise DataError(f"{path}: not TGB's negatives pickle (a {type(table).__name__}, not a dict)")
    triples = {}
    for key, value in table.items():
        try:
            triples[_triple(key)] = value
        except (TypeError, ValueError, OverflowError):
            raise DataError(f"{path}: not TGB's negatives pickle (key {shorten(repr(key))} is not a (src, dst, t) "
                            "triple of integers)") from None
    table = triples
    parts = []
    for i, key in enumerate(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)):
        got = table.get(key)
        if got is None:
            raise DataError(f"{path}: no negatives for evaluation event {i} (src {key[0]}, dst {key[1]}, t {key[2]}); "
                            "the pickle belongs to another dataset or version")
        try:
            ids = np.asarray(got, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            ids = np.array([np.nan])
        if not (np.isfinite(ids) & (ids == np.floor(ids))).all():  # astype(int64) would misread them
            raise DataError(f"{path}: the negatives of evaluation event {i} ({shorten(repr(got))}) are not "
                            "integer node ids")
        parts.append(ids.astype(np.int64))
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([p.shape[0] for p in parts], out=offsets[1:])
    out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if out.shape[0] and (out.min() < 0 or out.max() >= n):
        raise DataError(f"{path}: a negative destination lies outside TGB's ids 0 .. {n - 1}")
    return offsets, out


def read_tgb(root: str | Path):
    """A TGB dataset directory as TGB reads it: ``(name, src, dst, t, features, N, S, feature names, split,
    {"val": (offsets, dst), "test": ...}, the edge list's path, whether the file was in time order)``; events
    stably sorted by time, ``split`` as event index ranges."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory; give TGB's dataset directory (e.g. datasets/tgbl_wiki)")
    name, edges, val_path, test_path = _files(root)
    src, dst, t, feat, n, s, names = _edges(name, edges)
    in_order = bool(np.all(np.diff(t) >= 0))
    order = np.argsort(t, kind="stable")
    src, dst, t, feat = src[order], dst[order], t[order], feat[order]
    val_time, test_time = np.quantile(t, [1 - _VAL - _TEST, 1 - _TEST])
    a, b = int(np.searchsorted(t, val_time, "right")), int(np.searchsorted(t, test_time, "right"))
    split = {"train": (0, a), "val": (a, b), "test": (b, t.shape[0])}
    negatives = {k: _negatives(p, src[lo:hi], dst[lo:hi], t[lo:hi], n)
                 for k, p in (("val", val_path), ("test", test_path)) for lo, hi in [split[k]]}
    return name, src, dst, t, feat, n, s, names, split, negatives, edges, in_order


def prepare_tgb(input_dir: str | Path, output: str | Path, force: bool = False, shard_events: int | None = None,
                time_unit: float | None = None) -> EventManifest:
    """``prepare DIR --format tgb``: write TGB's dataset in ``DIR`` as an event dataset at ``output``
    (``time_unit``: divide the times by it, after the negatives were looked up by TGB's integer times)."""
    check_shard_events_and_time_unit(input_dir, shard_events, time_unit)  # before reading: 0 read as "none"
    name, src, dst, t, feat, n, s, names, split, negatives, edges, in_order = read_tgb(input_dir)
    bipartite = s < n
    times = t.astype(np.float64) / (time_unit or 1.0)
    return write_events(output, src, dst, times, feat if feat.shape[1] else None, num_vertices=n,
                        shard_events=shard_events or DEFAULT_SHARD_EVENTS,
                        bipartite=bipartite, num_sources=s if bipartite else None, feature_names=names,
                        original_ids=None, split=split, source={"path": str(Path(edges).absolute()),
                                                                "format": "tgb", "dataset": f"tgbl-{name}"},
                        force=force, sorted_input=in_order, eval_negatives=negatives,
                        negatives_origin=f"tgb:tgbl-{name}")
