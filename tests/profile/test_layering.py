"""The profiler depends on the plan's workload module, never the reverse (no cycle, no profiler code in a plan)."""

from __future__ import annotations

import subprocess
import sys


def test_planning_imports_no_profiler():
    """Importing ``hpcdgnn.partition`` and its workload models loads nothing from ``hpcdgnn.profile``."""
    code = ("import sys, hpcdgnn.partition, hpcdgnn.partition.workload; "
            "print(sorted(m for m in sys.modules if m.startswith('hpcdgnn.profile')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
