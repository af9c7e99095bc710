"""np.unique (values only) against hpcdgnn.indices.unique_ints on the id arrays this code makes, side by side.

    python perf/bench_unique.py [--repeat 20]

Rows: a TGN batch's vertices (roots and sampled neighbours, a few thousand ids of a 10⁴-vertex graph), a
sampled sequence's rows (10⁵ ids of 10⁶), a snapshot's active vertices and pair keys (3·10⁵ ids, keys up to
10¹²). Prints numpy's version, microseconds per call of each and their ratio; both results are checked equal.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcdgnn.indices import unique_ints  # noqa: E402

CASES = [  # (what, size, largest id)
    ("TGN batch vertices", 6_600, 10_000),
    ("sampled rows", 100_000, 1_000_000),
    ("snapshot vertices", 312_000, 1_000_000),
    ("snapshot pair keys", 156_000, 10**12),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"numpy {np.__version__}")
    print(f"{'ids':<22}{'size':>9}  {'np.unique us':>13}  {'unique_ints us':>15}  {'ratio':>6}")
    for what, size, high in CASES:
        x = rng.integers(0, high, size)
        assert np.array_equal(np.unique(x), unique_ints(x))
        a = min(timeit.repeat(lambda: np.unique(x), number=1, repeat=args.repeat))
        b = min(timeit.repeat(lambda: unique_ints(x), number=1, repeat=args.repeat))
        print(f"{what:<22}{size:>9,}  {a * 1e6:>13,.0f}  {b * 1e6:>15,.0f}  {a / b:>6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
