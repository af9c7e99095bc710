"""Provenance of s32_sm_max_send_size_training.log (thirty-second session): perf/bench_overlap.py's runs
(gen32k, P = 2, CD-GCN hidden 16) alternating Open MPI's btl_sm_max_send_size unset (32 KiB) and 256 KiB.

    python perf/results/overlap-vm/s32_mca_ab.py ROUNDS
"""

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import bench_overlap as bo  # noqa: E402

VAR = "OMPI_MCA_btl_sm_max_send_size"
CONFIGS = [("calls", 1), ("calls", 16), ("thread", 16)]


def main() -> None:
    args = bo.argparse.Namespace(data=Path("/tmp/d/gen32k"), model="cdgcn", hidden=16, epochs=5, device="cpu",
                                 blocks=1, chunks=[1, 16], grad_buckets=1, trace=False, ranks=2,
                                 warmup=1)  # as run; perf/bench_overlap.py's default is now 3
    res: dict[tuple[str, str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(int(sys.argv[1])):
            for mca in (["32K", "256K"] if rep % 2 == 0 else ["256K", "32K"]):
                if mca == "256K":
                    os.environ[VAR] = "262144"  # run_env copies os.environ into each run's
                else:
                    os.environ.pop(VAR, None)
                for mode, K in (CONFIGS if rep % 2 == 0 else CONFIGS[::-1]):
                    recs, _, _ = bo.run(Path(tmp), args, K, mode, 10 * rep + (mca == "256K"))
                    res.setdefault((mca, mode, K), []).extend(recs)
                    print(rep, mca, mode, K, " ".join(f"{r['time']['epoch']['max']:.3f}/"
                                                      f"{r['time']['comm_exposed']['mean']:.3f}" for r in recs),
                          flush=True)
    print("mca  mode  K  epoch  exposed  exp-late  loss")
    for (mca, mode, K), rs in sorted(res.items()):
        exposed, split = bo._exposed(rs)
        print(mca, mode, K, f"{np.median([r['time']['epoch']['max'] for r in rs]):.3f} {np.median(exposed):.3f} "
              f"{np.median(split[:, 1]):.3f} {rs[-1]['loss']:.6f}")


if __name__ == "__main__":
    main()
