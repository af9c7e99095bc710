"""``python -m hpcdgnn plan`` (predict before queueing) and ``python -m hpcdgnn calibrate`` (measure the rates)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from hpcdgnn.errors import ConfigError, cannot_create

__all__ = ["add_calibrate_arguments", "add_plan_arguments", "check_calibrate_arguments", "label", "nothing_fits",
           "parse_size", "run_calibrate", "run_plan", "size_text"]

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}


def parse_size(text: str, what: str) -> float:
    """``16GiB``, ``512MB``, ``2.5g``, a byte count -> bytes (binary units for bare K/M/G/T).

    Raises:
        ConfigError: naming ``what`` and the text.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS or float(m.group(1)) <= 0:
        raise ConfigError(f"{what}: {text!r} is not a size; write e.g. 16GiB, 512MB or a byte count > 0")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """``plan``'s options."""
    p.add_argument("job", help="job YAML: its model, task and data; its strategy's options (with strategy: auto, its "
                   "candidates, options and memory_per_rank)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1], metavar="P", help="rank counts to plan for")
    p.add_argument("--strategies", nargs="+", metavar="NAME", help="only these strategies (default: all)")
    p.add_argument("--memory-per-rank", metavar="SIZE", help="each rank's memory budget, e.g. 16GiB")
    p.add_argument("--rates", metavar="FILE", help="machine rates file (default: this machine's, or defaults)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="the rates of which device")
    p.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE", help="override YAML keys")
    p.add_argument("--json", action="store_true", help="print the predictions as JSON")


def _mib(x: float) -> str:
    return "-" if x != x else f"{x / 2**20:,.2f}"


def run_plan(args: argparse.Namespace) -> int:
    """Print every strategy's predicted memory, traffic, balance and epoch time at each P; mark the pick."""
    from hpcdgnn.config import load_job
    from hpcdgnn.planner.predict import DEFAULT_RATES_NOTE, auto_inputs, plan_job
    from hpcdgnn.planner.rates import load_rates
    from hpcdgnn.planner.work import planning_threads
    from hpcdgnn.regimes import regime_of
    from hpcdgnn.strategies import get_strategy

    planning_threads()
    job = load_job(args.job, args.set or [])
    names, given, budget = (auto_inputs(job, args.job) if get_strategy(job.strategy.name).picks_another
                            else (None, None, None))
    if args.memory_per_rank:
        budget = parse_size(args.memory_per_rank, "--memory-per-rank")
    rates = load_rates(args.device, job.train.dtype, args.rates)
    manifest = regime_of("model", job.model.name).load_manifest(job.data.path)
    preds = plan_job(job, manifest, job.data.path, args.ranks, rates, args.strategies or names, budget, given)
    if args.json:
        json.dump({"job": args.job, "rates": rates.source, "memory_per_rank": budget,
                   "predictions": [p.to_json() for p in preds]}, sys.stdout, indent=1, default=float)
        print()
    else:
        size = (f"T = {manifest.num_snapshots}" if hasattr(manifest, "num_snapshots")
                else f"E = {manifest.num_events}")
        print(f"plan of {args.job}: N = {manifest.num_vertices}, {size}, model {job.model.name}, "
              f"rates: {rates.source}" + (" (python -m hpcdgnn calibrate measures this machine's)"
                                          if rates.source == "defaults" else ""))
        head = f"{'P':>4}  {'strategy':<22} {'memory/rank MiB':>15} {'MiB/epoch':>11} {'λ':>6} " \
               f"{'compute s':>10} {'comm s':>9} {'epoch s':>9}  note"
        print(head)
        for p in preds:
            name = label(p, short=True)
            mark = "  <- pick" if p.picked else ""
            # every note but the rates' (the header names them): the event regime's waits and approximations too
            note = "; ".join(p.notes[:1]) if p.epoch_s != p.epoch_s else \
                "; ".join(["does not fit"] * (not p.fits) + [n for n in p.notes if n != DEFAULT_RATES_NOTE])
            print(f"{p.num_ranks:>4}  {name:<22} {_mib(p.memory_bytes):>15} {_mib(p.bytes_per_epoch):>11} "
                  f"{p.balance:>6.2f} {p.compute_s:>10.4f} {p.comm_s:>9.4f} {p.epoch_s:>9.4f}  {note}{mark}")
    for P in args.ranks:
        if not any(p.picked for p in preds if p.num_ranks == P):
            raise ConfigError(nothing_fits(preds, P, budget, job, manifest))
    return 0


def size_text(nbytes: float) -> str:
    """Bytes in the largest binary unit that keeps the number at or above 1."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:,.2f} {unit}"
    return f"{nbytes:,.0f} B"


def label(p, short: bool = False) -> str:
    """A prediction's strategy, with its checkpoint blocks when there are several, or its grid's sides."""
    o = p.options
    if o.get("blocks", 1) > 1:
        return p.strategy + (f" (blocks {o['blocks']})" if short else f" (strategy.blocks: {o['blocks']})")
    if o.get("snapshot_ranks"):
        return p.strategy + f" {o['snapshot_ranks']}x{o['vertex_ranks']}"
    if "minibatch" in o:
        return p.strategy + f" {o['minibatch']}x{o['epoch']}x{o['memory']}"
    return p.strategy


def nothing_fits(preds, P: int, budget: float | None, job, manifest) -> str:
    """One line: by how much the closest strategy misses the budget, and what would fit (naming the keys that size
    the job's parameters, from its regime's footprint)."""
    from hpcdgnn.planner.predict import SAMPLED_NOTE
    from hpcdgnn.regimes import regime_of

    parameter_keys = regime_of("model", job.model.name).footprint(job, manifest, P)["parameters"][1]
    priced = [p for p in preds if p.num_ranks == P and p.memory_bytes == p.memory_bytes]
    # a sampled strategy, priced but picked only when named, is no candidate of the pick: say that it fits apart
    sampled = [p for p in priced if SAMPLED_NOTE in p.notes]
    fitting = sorted((p for p in sampled if p.fits), key=lambda p: p.epoch_s)
    named = (f"; {label(fitting[0])} fits ({size_text(fitting[0].memory_bytes)}) but trains sampled batches, "
             "another trajectory: name it to use it (--strategies, strategy.candidates, or strategy.name)"
             if fitting else "")
    priced = [p for p in priced if SAMPLED_NOTE not in p.notes]
    if not priced:
        why = "; ".join(f"{p.strategy}: {p.notes[0]}" for p in preds if p.num_ranks == P and p.notes
                        and p.memory_bytes != p.memory_bytes)
        return f"plan: no strategy can be predicted for this job at P = {P} ({why}){named}"
    best = min(priced, key=lambda p: p.memory_bytes)
    fixed = best.memory_parts.get("parameters", 0.0)  # every rank holds the whole model
    if fixed >= budget:
        hint = f"its parameters with Adam's moments alone need {size_text(fixed)}: lower {parameter_keys}"
    else:
        more = math.ceil(P * (best.memory_bytes - fixed) / (budget - fixed))
        hint = (f"spread over about P = {more} ranks it would fit (inputs and activations divide), or lower "
                f"{parameter_keys}")
    return (f"plan: no strategy fits {size_text(budget)} per rank at P = {P}: the smallest, {label(best)}, needs "
            f"{size_text(best.memory_bytes)} ({size_text(best.memory_bytes - budget)} over); {hint}{named}")


def add_calibrate_arguments(p: argparse.ArgumentParser) -> None:
    """``calibrate``'s options."""
    p.add_argument("--widths", type=int, nargs="+", default=[8, 32, 128], metavar="W",
                   help="product widths to time (default 8 32 128)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="device to time on")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="as train.dtype")
    p.add_argument("--threads", type=int, default=1, help="torch threads (one rank's share of the cores)")
    p.add_argument("--out", "--output", dest="out", metavar="PATH",
                   help="rates file (default: the per-machine cache path)")
    p.epilog = ("Under mpirun every rank times at once and the slowest rank's product rates are kept: run it "
                "with the ranks per node your jobs use.")


def check_calibrate_arguments(args: argparse.Namespace) -> None:
    """``calibrate``'s options, which every rank reads alike (whether its device is there is each node's own).

    Raises:
        ConfigError: ``calibrate --threads 0: ...``, ``calibrate --widths: ...``, ``calibrate --out PATH: ...``
            (a directory, or where no file can be made: found before the minutes of measuring, not after).
    """
    if args.out is not None:
        out = Path(args.out)
        if out.is_dir():
            raise ConfigError(f"calibrate --out {out}: is a directory; give the rates file's path, e.g. "
                              f"{out / 'rates.json'}")
        why = cannot_create(out.parent)
        if why is not None:
            raise ConfigError(f"calibrate --out {out}: cannot write it there ({why})")
    if args.threads < 1:
        raise ConfigError(f"calibrate --threads {args.threads}: must be >= 1 (one rank's share of the cores)")
    if min(args.widths) < 1:
        raise ConfigError(f"calibrate --widths: {min(args.widths)} is no width; give widths >= 1 (e.g. 8 32 128)")


def run_calibrate(args: argparse.Namespace) -> int:
    """Measure this machine's rates (and, under mpirun, the collectives at this P); merge them into the file."""
    import torch

    from hpcdgnn.comm import Communicator
    from hpcdgnn.ops.sparse import sorted_csr
    from hpcdgnn.partition.workload import machine_info
    from hpcdgnn.planner.rates import load_rates, rates_path, save_rates
    from hpcdgnn.planner.samples import seconds_per_sampled_entry
    from hpcdgnn.planner.work import best_seconds, seconds_per_call, seconds_per_pair, seconds_per_rebuilt_entry
    from hpcdgnn.train.collective import agree

    check_calibrate_arguments(args)
    torch.set_num_threads(args.threads)
    comm = Communicator()

    def gpu_here() -> None:
        if args.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("calibrate --device cuda: no GPU is visible here")

    # every rank's node, agreed: a rank without one failed alone while the others went on into the collectives
    # (an srun without --kill-on-bad-exit left them waiting there), and each rank without one printed the line
    agree(comm, gpu_here)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    path = rates_path(args.device, args.dtype) if args.out is None else Path(args.out)
    rates = load_rates(args.device, args.dtype, path if path.is_file() else None)
    rows = 1 << 14
    for w in args.widths:
        a, b = torch.randn(rows, w, dtype=dtype, device=dev), torch.randn(w, w, dtype=dtype, device=dev)
        rates.dense_flops[str(w)] = 2.0 * rows * w * w / best_seconds(lambda a=a, b=b: (a @ b, sync()))
        n, deg = 1 << 14, 8
        r = torch.arange(n).repeat_interleave(deg)
        c = torch.randint(0, n, (n * deg,))
        adj = sorted_csr(r, c, torch.rand(n * deg, dtype=dtype), (n, n)).to(dev)
        x = torch.randn(n, w, dtype=dtype, device=dev)
        rates.sparse_rate[str(w)] = adj.values().numel() * w / best_seconds(lambda adj=adj, x=x: (adj @ x, sync()))
        lstm = torch.nn.LSTM(w, w).to(dev, dtype)
        seq = torch.randn(8, 2048, w, dtype=dtype, device=dev, requires_grad=True)

        def rnn(lstm=lstm, seq=seq):
            lstm(seq)[0].sum().backward()
            sync()
        # the forward's 2·rows·(|W_ih| + |W_hh|) FLOPs and twice that backward, as planner/work.py counts them
        rnn_flops = 3 * 2 * 8 * 2048 * (lstm.weight_ih_l0.numel() + lstm.weight_hh_l0.numel())
        rates.rnn_flops[str(w)] = rnn_flops / best_seconds(rnn)
    rates.op_seconds = seconds_per_call()
    rates.sample_seconds = seconds_per_sampled_entry()
    rates.norm_seconds, rates.transpose_seconds = seconds_per_rebuilt_entry(rates.op_seconds, dev, dtype)
    rates.pair_seconds, rates.drawn_pair_seconds, rates.placed_pair_seconds = seconds_per_pair()
    if dev.type == "cuda":
        host = torch.empty(1 << 26, dtype=torch.uint8).pin_memory()
        rates.h2d_bandwidth = host.numel() / best_seconds(lambda: (host.to(dev, non_blocking=True), sync()))
    P = comm.size
    if P > 1:  # every rank measured at once (a loaded node): keep the slowest rank's rates
        for table in (rates.dense_flops, rates.rnn_flops, rates.sparse_rate):
            for w in args.widths:
                table[str(w)] = float(comm.allreduce_array([table[str(w)]], op="min", tag="setup")[0])
        rates.op_seconds = float(comm.allreduce_array([rates.op_seconds], op="max", tag="setup")[0])
        for key in ("sample_seconds", "pair_seconds", "drawn_pair_seconds", "placed_pair_seconds", "norm_seconds",
                    "transpose_seconds"):
            setattr(rates, key, float(comm.allreduce_array([getattr(rates, key)], op="max", tag="setup")[0]))
        small, big = torch.zeros(1, dtype=torch.float64), torch.zeros(1 << 20, dtype=torch.float64)
        lat = best_seconds(lambda: comm.allreduce_(small, "sum", tag="setup"), 20)
        t_big = best_seconds(lambda: comm.allreduce_(big, "sum", tag="setup"))
        rates.allreduce[str(P)] = [lat, big.numel() * 8 / max(t_big - lat, 1e-9)]
        rows_each = (1 << 17) // P
        send = torch.zeros(rows_each * P, 1, dtype=torch.float64)
        counts = [rows_each] * P
        lat = best_seconds(lambda: comm.exchange.alltoallv(torch.zeros(P, 1, dtype=torch.float64), [1] * P, [1] * P,
                                                    tag="setup"), 20)
        t_big = best_seconds(lambda: comm.exchange.alltoallv(send, counts, counts, tag="setup"))
        rates.alltoall[str(P)] = [lat, rows_each * (P - 1) * 8 / max(t_big - lat, 1e-9)]
    rates.machine = machine_info(args.device)
    if comm.rank == 0:
        try:
            save_rates(rates, path)
        except OSError as e:  # a full disk, a quota: one line, not the traceback of an atomic rename
            raise ConfigError(f"calibrate --out {path}: cannot write it ({e.strerror or e}); nothing was "
                              "written") from None
        print(f"rates of this {args.device} ({args.dtype}, {args.threads} thread(s), P = {P}) written to {path}")
        for w in args.widths:
            print(f"  width {w:>4}: dense {rates.dense_flops[str(w)] / 1e9:8.2f} GFLOP/s, "
                  f"RNN {rates.rnn_flops[str(w)] / 1e9:8.2f} GFLOP/s, sparse {rates.sparse_rate[str(w)] / 1e6:8.1f} "
                  "M nnz·w/s")
        print(f"  one framework call: {rates.op_seconds * 1e6:.2f} µs; the sampler: {rates.sample_seconds * 1e9:.0f} "
              "ns per entry scanned")
        print(f"  Ã_t rebuilt: {rates.norm_seconds * 1e9:.0f} ns per entry normalised, "
              f"{rates.transpose_seconds * 1e9:.0f} ns per entry transposed")
        print(f"  a scored pair: {rates.pair_seconds * 1e9:.0f} ns from whole snapshots; in place "
              f"{rates.drawn_pair_seconds * 1e9:.0f} ns per pair drawn + {rates.placed_pair_seconds * 1e9:.0f} ns "
              "per pair kept")
        if P > 1:
            print(f"  all-reduce: {rates.allreduce[str(P)][0] * 1e6:.1f} µs + {rates.allreduce[str(P)][1] / 1e9:.2f} "
                  f"GB/s; all-to-all: {rates.alltoall[str(P)][0] * 1e6:.1f} µs + "
                  f"{rates.alltoall[str(P)][1] / 1e9:.2f} GB/s per rank")
    comm.close()
    return 0
