"""Pool the per-cycle ratios of the thirty-fourth session's interleaved rounds (s34_interleave_round*.log).

The last configuration's exposed over K = 1 `calls`' within each cycle, over all cycles and by machine state
(every probe of the cycle under 20 ms: fast; over 25 ms: slow): python perf/results/overlap-vm/s34_pool.py
"""
import re
from pathlib import Path

import numpy as np

cycles = {"all": [], "fast": [], "slow": []}
for log in sorted(Path(__file__).parent.glob("s34_interleave_round*.log")):
    for line in log.read_text().splitlines():
        if "per cycle" in line:
            for m in re.finditer(r"([\d./]+) \[([\d. ]+)\]", line.split("[probes, ms]:")[1]):
                ratio, probes = float(m.group(1).split("/")[-1]), [float(p) for p in m.group(2).split()]
                cycles["all"].append(ratio)
                if all(p < 20 for p in probes):
                    cycles["fast"].append(ratio)
                elif all(p > 25 for p in probes):
                    cycles["slow"].append(ratio)
for name, v in cycles.items():
    q25, q50, q75 = np.percentile(v, [25, 50, 75])
    share = np.mean(np.array(v) <= 0.5)
    print(f"{name}: {len(v)} cycles, median {q50:.2f} ({q25:.2f}-{q75:.2f}), {share:.0%} at or below 0.5")
