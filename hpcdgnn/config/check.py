"""``python -m hpcdgnn check JOB.yaml --ranks P``: what a run of the job would start with, without training.

It runs the checks and the plan of a run's set-up (:func:`hpcdgnn.train.setup.check_job`, the dataset's shard
check, the strategy's ``make_plan``) in one process for P ranks, and prints the resolved configuration, the
plan's per-rank table and each rank's memory: the lower bound the run refuses a job by, and the planner's
predicted peak where the strategy has a cost model. A job those checks refuse gets the run's one-line error and
exit 2; what a run checks only once it holds its ranks and directories (the output and checkpoint directories,
the devices, the training examples its split leaves) is not checked here. ``--schema`` prints a JSON Schema of
the job file instead (for editors).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import yaml

__all__ = ["add_check_arguments", "run_check"]


def add_check_arguments(p: argparse.ArgumentParser) -> None:
    """``check``'s options."""
    p.add_argument("job", nargs="?", help="job YAML")
    p.add_argument("--ranks", type=int, default=1, metavar="P", help="the rank count the job would run on")
    p.add_argument("--ranks-per-node", type=int, metavar="R",
                   help="ranks sharing a node like this machine (default: min(P, its CPUs)); a run divides the "
                        "node's RAM (or its cgroup limit) among its ranks there")
    p.add_argument("--memory-per-rank", metavar="SIZE",
                   help="each rank's memory instead, e.g. 16GiB: the host's, or the GPU's for a GPU job")
    p.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE", help="override YAML keys")
    p.add_argument("--json", action="store_true", help="print the same as JSON")
    p.add_argument("--schema", action="store_true", help="print a JSON Schema of the job file and exit")


def _budgets(args: argparse.Namespace, job) -> tuple[float, float | None, str]:
    """Host bytes per rank, a GPU's bytes (None for a CPU job), and where they come from — as a run divides them:
    the node's RAM (or cgroup limit) over its ranks, the GPU's memory (``--memory-per-rank`` replaces either)."""
    import torch

    from hpcdgnn.comm.device import node_memory
    from hpcdgnn.errors import ConfigError
    from hpcdgnn.planner.command import parse_size

    given = parse_size(args.memory_per_rank, "--memory-per-rank") if args.memory_per_rank else None
    per_node = args.ranks_per_node or min(args.ranks, os.cpu_count() or 1)
    host = given if given is not None else node_memory() / per_node
    cuda = job.train.device == "cuda" or job.train.device == "auto" and torch.cuda.is_available()
    if not cuda:
        ranks = (f"{per_node} ranks" if args.ranks_per_node else
                 f"{per_node} ranks a node: min(P, its {os.cpu_count() or 1} CPUs); --ranks-per-node R for R")
        return host, None, ("--memory-per-rank" if given is not None else
                            f"this machine's memory / {ranks} (train.device: {job.train.device} runs on the CPU "
                            "here)")
    if given is not None:
        return host, given, "--memory-per-rank, as each rank's GPU memory"
    if not torch.cuda.is_available():
        raise ConfigError("check: train.device: cuda, and this machine has no GPU; give --memory-per-rank (the "
                          "memory of one rank's GPU)")
    return host, float(torch.cuda.get_device_properties(0).total_memory), "this machine's GPU 0"


def _cell(value) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(str, value[:4])) + (", ..." if len(value) > 4 else "") + "]"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plan_table(plan) -> list[str]:
    """One line per rank of the plan's ``ranks`` (what each owns and its estimated work)."""
    rows = getattr(plan, "ranks", None)
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return [json.dumps(plan.to_json(), default=str)[:400]]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[str(p)] + [_cell(r.get(k, "")) for k in keys] for p, r in enumerate(rows)]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(["rank", *keys])]
    line = lambda cs: "  ".join(c.rjust(w) for c, w in zip(cs, widths, strict=True))  # noqa: E731
    return [line(["rank", *keys]), *(line(c) for c in cells)]


def run_check(args: argparse.Namespace) -> int:
    """Check the job for ``--ranks`` P as a run's set-up would, print what it would start with; 0, or the error."""
    from hpcdgnn.config import job_to_dict, load_job
    from hpcdgnn.errors import ConfigError, DataError, PlanError

    if args.schema:
        from hpcdgnn.config.reference import json_schema

        json.dump(json_schema(), sys.stdout, indent=1)
        print()
        return 0
    if not args.job:
        raise ConfigError("check: give a job YAML (or --schema)")
    from hpcdgnn.planner.predict import check_ranks

    check_ranks([args.ranks], "check --ranks")
    if args.ranks_per_node is not None and args.ranks_per_node < 1:
        raise ConfigError(f"check --ranks-per-node: {args.ranks_per_node}; a node runs at least 1 rank")

    from hpcdgnn.data.validate import check_dataset
    from hpcdgnn.planner.work import planning_threads
    from hpcdgnn.strategies import get_strategy
    from hpcdgnn.train.footprint import lower_bound, predicted_peak
    from hpcdgnn.train.setup import _blamed, check_job

    planning_threads()
    P = args.ranks
    job = load_job(args.job, args.set or [])
    share, device_memory, share_from = _budgets(args, job)
    # as a run's set-up says them: a key a --set gave is named so, not as the job file's
    try:
        job, manifest, planner = check_job(job, args.job, P, share, device_memory)
    except (ConfigError, DataError) as e:
        raise _blamed(e, args.job, args.set or []) from None
    check_dataset(job.data.path, checksums=job.data.validate == "checksum")
    try:
        plan = get_strategy(job.strategy.name).make_plan(manifest, P, job)
        get_strategy(job.strategy.name).check_reads(plan, job, manifest)
        if args.ranks_per_node:  # where ranks meet on nodes is known only when said
            get_strategy(job.strategy.name).check_nodes(plan, args.ranks_per_node)
    except (PlanError, ConfigError) as e:
        raise _blamed(e, args.job, args.set or [], prefix=True) from None
    bound = lower_bound(job, manifest, P)
    predicted = predicted_peak(job, manifest, P, share)
    report = {
        "job": args.job, "num_ranks": P, "config": job_to_dict(job), "plan": plan.to_json(),
        "memory": {"host_share_bytes": share, "host_share_from": share_from,
                   "lower_bound_bytes": sum(b for b, _ in bound.values()),
                   "lower_bound_parts": {k: {"bytes": b, "set_by": keys} for k, (b, keys) in bound.items()},
                   "predicted": predicted},
        "planner": planner,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=1, default=str)
        print()
        return 0
    mib = lambda b: f"{b / 2**20:,.2f} MiB"  # noqa: E731
    print(f"check of {args.job} at P = {P}: a run would start (nothing trained)")
    print("\n# resolved configuration (every default filled in)")
    print(yaml.safe_dump(report["config"], sort_keys=False).rstrip())
    print(f"\n# plan: strategy {job.strategy.name}, {P} rank{'s' if P != 1 else ''}")
    print("\n".join(_plan_table(plan)))
    mem = report["memory"]
    print(f"\n# memory per rank (host share {mib(share)}: {share_from})")
    parts = ", ".join(f"{k} {mib(b)}" for k, (b, _) in bound.items())
    print(f"lower bound {mib(mem['lower_bound_bytes'])} ({parts}): a run refuses the job above its share")
    if predicted is not None:
        ranks = predicted["by_rank"]
        print(f"predicted peak {mib(predicted['bytes'])} on the most loaded rank (planner: "
              + ", ".join(f"{_PARTS.get(k, k)} {mib(v)}" for k, v in predicted["parts"].items() if v)
              + f"; rates {predicted['rates']})")
        print("  by rank: " + _by_rank(ranks))
    return 0


#: the planner's memory parts as the check's line names them. A full-batch strategy keeps its inputs (Ã_t, X_t)
#: resident for the epoch ("inputs"); a sampled one (``sequences``, ``hybrid``: the closure's rows it reads once,
#: DynaHB §4.1) keeps them on the host and builds each batch from there ("host"), its "inputs" 0 — which the line
#: printed as "inputs 0.00 MiB", read as "reads nothing". A part of 0 bytes is left out; ``--json`` keeps them all.
_PARTS = {"inputs": "resident inputs", "host": "host-held inputs"}

#: above this many ranks the by-rank memory line is summarised (the JSON keeps every rank's)
_LISTED_RANKS = 8


def _by_rank(ranks: list[float]) -> str:
    """Each rank's predicted peak in MiB, ``r:MiB`` each up to :data:`_LISTED_RANKS` ranks, beyond that min,
    median and max with the ranks that hold the extremes (one line a terminal shows whole at P = 1024).

    Args:
        ranks: bytes per rank, rank 0 first.
    """
    import numpy as np

    if len(ranks) <= _LISTED_RANKS:
        return " ".join(f"{r}:{b / 2**20:,.1f}" for r, b in enumerate(ranks)) + " MiB"
    mib = np.asarray(ranks, dtype=np.float64) / 2**20
    low, high = int(mib.argmin()), int(mib.argmax())
    return (f"min {mib[low]:,.1f} (rank {low}), median {np.median(mib):,.1f}, max {mib[high]:,.1f} (rank {high}) "
            f"MiB over {len(ranks)} ranks; --json lists each rank's")


