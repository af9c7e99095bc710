"""``hpcdgnn check`` under ``hybrid``: the set-up's refusals that need each rank's closure read from the shards
(``strategy.max_cache_mb``, ``strategy.reservoir.max_mb``), each closure read once."""

from __future__ import annotations

from collections import Counter

from hpcdgnn.data.shard_reader import ShardReader
from tests.strategies.test_hybrid import _job, sparse  # noqa: F401 (a fixture)

HYBRID = ["strategy.name=hybrid", "strategy.vertex_fractions=[0.5]", "train.epochs=1"]


def test_check_reads_each_closure_once_when_both_limits_are_set(sparse, tmp_path, capsys, monkeypatch):  # noqa: F811
    """With ``max_cache_mb`` and the reservoir both on, ``check`` read every rank's closure twice (once for each
    refusal; at P = 128, 256 passes over the shards). Each (snapshot, rows) is read once now, and a closure over
    ``max_cache_mb`` is refused with the same line, naming the same rank, as without the reservoir."""
    from hpcdgnn.__main__ import main

    job = _job(tmp_path, sparse)
    reads: Counter = Counter()
    read_rows = ShardReader.read_rows

    def counted(self, t, rows):
        reads[t, rows.tobytes()] += 1
        return read_rows(self, t, rows)

    monkeypatch.setattr(ShardReader, "read_rows", counted)
    both = [*HYBRID, "strategy.reservoir.mode=on", "strategy.max_cache_mb=100"]
    assert main(["check", str(job), "--ranks", "3", "--set", *both]) == 0, capsys.readouterr().err
    assert reads and max(reads.values()) == 1, [k[0] for k, n in reads.items() if n > 1]
    lines = []
    for reservoir in ("off", "on"):
        sets = [*HYBRID, f"strategy.reservoir.mode={reservoir}", "strategy.max_cache_mb=0.000001"]
        assert main(["check", str(job), "--ranks", "3", "--set", *sets]) == 2
        err = capsys.readouterr().err
        lines.append(err[err.index("strategy.max_cache_mb: rank "):])
    assert lines[0] == lines[1] and "strategy.max_cache_mb: rank 0's closure holds" in lines[0], lines
