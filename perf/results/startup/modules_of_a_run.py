"""The modules a P = 1 run of JOB imports, its wall time and peak RSS (perf/results/startup/issue60-imports.txt).

    python perf/results/startup/modules_of_a_run.py TREE JOB RUNDIR

TREE: the checkout whose hpcdgnn runs (put first on the path; e.g. an older commit's ``git archive``).
"""

from __future__ import annotations

import contextlib
import io
import resource
import sys
import time


def main(tree: str, job: str, run_dir: str) -> None:
    sys.path.insert(0, tree)
    t = time.perf_counter()
    from hpcdgnn.__main__ import main as hpcdgnn_main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = hpcdgnn_main(["run", job, "--output", run_dir])
    wall = time.perf_counter() - t
    ours = sorted(m for m in sys.modules if m.startswith("hpcdgnn"))
    extras = sorted({m.split(".")[0] for m in sys.modules} & {"tensorboard", "matplotlib", "jsonschema",
                                                                "torch_geometric"})
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"rc {rc}  wall {wall:.2f} s  modules {len(sys.modules)}  hpcdgnn modules {len(ours)}  max RSS {rss} MiB  "
          f"extras {extras or 'none'}")
    print(" ".join(ours))


if __name__ == "__main__":
    main(*sys.argv[1:4])
