"""hpcdgnn's TGN (``strategy: memory``) against PyTorch Geometric's TGN on the same events, side by side (issue 61 §1).

    python perf/bench_tgn.py --against pyg [--inputs college email jodie generated] [--max-events N]
                             [--generated-events 1000000] [--epochs 2] [--width 100] [--neighbors 10]
                             [--batch 200] [--eval-negatives 49] [--threads 1] [--configs 1x1x1 2x1x1 1x1x2]
                             [--device cpu|cuda] [--before DIR...] [--eval-protocol per_event per_batch]
                             [--train-protocol per_event per_batch] [--memory-time query event]
                             [--ceiling] [--repeat 1]

PyG's side is its ``examples/tgn.py`` model, written here against PyG's API: ``TGNMemory`` (IdentityMessage,
LastAggregator), a ``TransformerConv`` attention embedding (2 heads, dropout 0.1, edge attributes = time
encoding ‖ message), ``LastNeighborLoader`` (``--neighbors``), the two-layer link predictor, Adam lr 1e-4,
BCE with one uniformly drawn negative destination per event, batches of ``--batch`` events. PyG is never a
dependency of hpcdgnn: install it beside the project (``pip install torch_geometric`` or ``--target DIR`` and
``PYTHONPATH=DIR``). hpcdgnn's side is ``python -m hpcdgnn run`` of ``model: tgn`` at the same widths
(memory = time = hidden = ``--width``), neighbours, heads, batch (``task.batch_events``), one training negative,
lr 1e-4, float32, per configuration i×j×k of ``--configs`` on i·j·k ranks (``perf/bench_tgnn.py``).

Both evaluate the same way after every epoch, continuing the memory through validation then test: each
positive against ``--eval-negatives`` uniform negative destinations, MRR = mean 1/rank with rank = 1 +
(#negatives scoring above it + #at or above) / 2 (TGB's, hpcdgnn's: a tie counts half); AP per batch of
the positives against their first negative (one per positive, as PyG's example and TGL), averaged over
batches (``hpcdgnn.tasks.temporal_link_prediction.average_precision`` for both).
PyG embeds each distinct node of a batch once; hpcdgnn does so with ``task.eval_protocol: per_batch`` and
embeds every ranked node at its own event's time with ``per_event`` (TGL's, the default): ``--eval-protocol``
runs hpcdgnn under each given one. ``--memory-time`` likewise runs ``model.memory_time``: ``query`` (TGL's time
term, the default) and ``event`` (TGN's and PyG's: the gap of the mail's own event; evaluation then applies each
mail once, as PyG's ``TGNMemory`` does outside training).

Inputs (each prepared with ``python -m hpcdgnn prepare --kind events``, timestamps in seconds as in the file;
both systems read the prepared events and its 70/15/15 chronological split):

* ``college``, ``email``: CollegeMsg and email-Eu-core from ../shared/data (``--max-events``: first N lines);
* ``jodie``: a synthetic JODIE csv made from CollegeMsg (bipartite, 4 random edge features; perf/bench_tgnn.py);
* ``generated``: ``--generated-events`` events over 10,000 nodes, written by this script (seed 0): a source
  drawn by Zipf popularity (exponent 1.2), its destination one of its earlier partners with probability 0.7,
  else by popularity; exponential gaps of mean 30 s; no edge features.

An input without edge features gives PyG's side one all-zero feature (its message store needs a width >= 1).

Per system and input: seconds per training epoch and events/s (mean over epochs after the first, which is
warm-up; every epoch when there is one), seconds per evaluation pass (validation + test) and its events/s,
the last epoch's loss, test AP and test MRR; then hpcdgnn's events/s over PyG's. ``--repeat R`` runs every
row R times, the rows alternating within each round so that a slow spell of a shared machine hits them alike:
seconds are then medians over the rounds, and each ratio is the median of the rounds' own ratios, followed by
its range [min–max] (the spread to read a ratio against). ``--ceiling`` adds, per
configuration of P > 1 ranks, its training speed-up over hpcdgnn's 1x1x1 beside the node's ceiling at P (P
copies of the 1x1x1 run at once, as ``perf/scaling.py --ceiling``): the share of what this node allows.
A benchmark measures; it asserts nothing and writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import run_job  # noqa: E402
from bench_tgnn import REPO, parse_config, prepare  # noqa: E402


def generated_stream(path: Path, events: int, nodes: int = 10_000, seed: int = 0) -> Path:
    """The ``generated`` input as a SNAP ``src dst time`` file (see the module docstring)."""
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, nodes + 1) ** 1.2
    pop /= pop.sum()
    src = rng.choice(nodes, events, p=pop)
    fresh = rng.choice(nodes, events, p=pop)
    again = rng.random(events) < 0.7
    last: dict[int, list[int]] = {}
    dst = np.empty(events, dtype=np.int64)
    for e in range(events):  # a partner drawn from the source's history, else a fresh popular node
        hist = last.setdefault(int(src[e]), [])
        d = hist[int(rng.integers(len(hist)))] if again[e] and hist else int(fresh[e])
        if d == src[e]:
            d = (d + 1) % nodes
        dst[e] = d
        if len(hist) < 50:
            hist.append(d)
    t = np.cumsum(rng.exponential(30.0, events)).astype(np.int64)
    np.savetxt(path, np.c_[src, dst, t], fmt="%d")
    return path


def load_prepared(data: Path):
    """Events, split and destination range of a prepared directory (as hpcdgnn reads them)."""
    sys.path.insert(0, str(REPO))
    from hpcdgnn.data.events import load_event_manifest, read_events

    m = load_event_manifest(data)
    ev = read_events(data, m)
    return m, ev


def run_pyg(data: Path, args) -> list[dict]:
    """PyG's TGN (examples/tgn.py's model) on the prepared events; one record per epoch."""
    import torch
    from torch.nn import Linear

    try:
        from torch_geometric.data import TemporalData
        from torch_geometric.loader import TemporalDataLoader
        from torch_geometric.nn import TGNMemory, TransformerConv
        from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator, LastNeighborLoader
    except ImportError as exc:
        sys.exit(f"perf/bench_tgn.py --against pyg: PyTorch Geometric is not importable ({exc}); install it beside "
                 "the project: pip install torch_geometric")
    from hpcdgnn.tasks.temporal_link_prediction import average_precision

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    m, ev = load_prepared(data)
    t = ev.t.astype(np.int64)
    if not np.array_equal(t, ev.t):
        sys.exit(f"{data}: PyG's TGNMemory keeps integer times; prepare without --time-unit")
    # without edge features PyG gets one all-zero feature: its message store needs a width >= 1
    msg = ev.efeat if ev.efeat.shape[1] else np.zeros((ev.efeat.shape[0], 1), np.float32)
    full = TemporalData(src=torch.from_numpy(ev.src), dst=torch.from_numpy(ev.dst), t=torch.from_numpy(t),
                        msg=torch.from_numpy(msg).float()).to(dev)
    w, n = args.width, m.num_vertices
    lo_dst, hi_dst = (m.num_sources, n) if m.bipartite else (0, n)  # hpcdgnn's candidate destinations
    loaders = {s: TemporalDataLoader(full[a:b], batch_size=args.batch) for s, (a, b) in m.split.items()}

    class GraphAttentionEmbedding(torch.nn.Module):
        def __init__(self, in_channels, out_channels, msg_dim, time_enc):
            super().__init__()
            self.time_enc = time_enc
            self.conv = TransformerConv(in_channels, out_channels // 2, heads=2, dropout=0.1,
                                        edge_dim=msg_dim + time_enc.out_channels)

        def forward(self, x, last_update, edge_index, t, msg):
            rel_t = last_update[edge_index[0]] - t
            edge_attr = torch.cat([self.time_enc(rel_t.to(x.dtype)), msg], dim=-1)
            return self.conv(x, edge_index, edge_attr)

    class LinkPredictor(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.lin_src, self.lin_dst, self.lin_final = Linear(c, c), Linear(c, c), Linear(c, 1)

        def forward(self, z_src, z_dst):
            return self.lin_final((self.lin_src(z_src) + self.lin_dst(z_dst)).relu())

    d = full.msg.size(-1)
    memory = TGNMemory(n, d, w, w, message_module=IdentityMessage(d, w, w), aggregator_module=LastAggregator()).to(dev)
    gnn = GraphAttentionEmbedding(w, w, d, memory.time_enc).to(dev)
    link_pred = LinkPredictor(w).to(dev)
    opt = torch.optim.Adam(set(memory.parameters()) | set(gnn.parameters()) | set(link_pred.parameters()), lr=1e-4)
    crit = torch.nn.BCEWithLogitsLoss()
    neighbors = LastNeighborLoader(n, size=args.neighbors, device=dev)
    assoc = torch.empty(n, dtype=torch.long, device=dev)

    def embed(batch_nodes):
        n_id, edge_index, e_id = neighbors(batch_nodes.unique())
        assoc[n_id] = torch.arange(n_id.size(0), device=dev)
        z, last_update = memory(n_id)
        return gnn(z, last_update, edge_index, full.t[e_id], full.msg[e_id])

    def train() -> float:
        memory.train(), gnn.train(), link_pred.train()
        memory.reset_state()
        neighbors.reset_state()
        total = 0.0
        for batch in loaders["train"]:
            opt.zero_grad()
            src, pos, bt, msg = batch.src, batch.dst, batch.t, batch.msg
            neg = torch.randint(lo_dst, hi_dst, (src.size(0),), device=dev)
            z = embed(torch.cat([src, pos, neg]))
            pos_out = link_pred(z[assoc[src]], z[assoc[pos]])
            neg_out = link_pred(z[assoc[src]], z[assoc[neg]])
            loss = crit(pos_out, torch.ones_like(pos_out)) + crit(neg_out, torch.zeros_like(neg_out))
            memory.update_state(src, pos, bt, msg)
            neighbors.insert(src, pos)
            loss.backward()
            opt.step()
            memory.detach()
            total += float(loss.detach()) * batch.num_events
        return total / (m.split["train"][1] - m.split["train"][0])

    @torch.no_grad()
    def evaluate(split: str) -> tuple[float, float]:
        memory.eval(), gnn.eval(), link_pred.eval()
        gen = torch.Generator(device=dev).manual_seed(12345)
        k, rr, aps = args.eval_negatives, [], []
        for batch in loaders[split]:
            src, pos, bt, msg = batch.src, batch.dst, batch.t, batch.msg
            b = src.size(0)
            neg = torch.randint(lo_dst, hi_dst, (b, k), device=dev, generator=gen)
            z = embed(torch.cat([src, pos, neg.reshape(-1)]))
            zs = z[assoc[src]]
            pos_out = link_pred(zs, z[assoc[pos]]).view(b)
            neg_out = link_pred(zs.repeat_interleave(k, 0), z[assoc[neg.reshape(-1)]]).view(b, k)
            # rounded to 9 decimals first, as hpcdgnn's ranks are (tasks.temporal_link_prediction._quantized)
            qn, qp = torch.round(neg_out.double(), decimals=9), torch.round(pos_out.double(), decimals=9)[:, None]
            above = (qn > qp).sum(1).double() + (qn >= qp).sum(1).double()
            rr.append((1.0 / (1.0 + 0.5 * above)).cpu())
            aps.append(average_precision(torch.cat([pos_out, neg_out[:, 0]]).double().cpu().numpy(),
                                         np.r_[np.ones(b), np.zeros(b)]))
            memory.update_state(src, pos, bt, msg)
            neighbors.insert(src, pos)
        return float(torch.cat(rr).mean()), float(np.mean(aps))

    recs = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        loss = train()
        t1 = time.perf_counter()
        (val_mrr, val_ap), (test_mrr, test_ap) = evaluate("val"), evaluate("test")
        t2 = time.perf_counter()
        recs.append({"train_s": t1 - t0, "eval_s": t2 - t1, "loss": loss, "val_mrr": val_mrr, "test_mrr": test_mrr,
                     "val_ap": val_ap, "test_ap": test_ap})
        print(f"  pyg epoch {epoch}: train {t1 - t0:.1f} s, eval {t2 - t1:.1f} s, loss {loss:.4f}, "
              f"test AP {test_ap:.4f}, MRR {test_mrr:.4f}", flush=True)
    return recs


def run_hpcdgnn(data: Path, work: Path, name: str, config: str, args, tree: Path | None = None,
                protocol: tuple[str, str] | None = None, copy: int | None = None, rnd: int = 0) -> list[dict]:
    """hpcdgnn's TGN on i·j·k ranks (from ``tree``'s code when given); one record per epoch (the slowest rank's
    training and evaluation time). ``copy``: one of several runs at once; ``rnd``: the round of ``--repeat``
    (each its own run directory)."""
    i, j, k = parse_config(config)
    w = args.width
    job = {"data": {"path": str(data)},
           "model": {"name": "tgn", "hidden": w, "memory_dim": w, "time_dim": w, "neighbors": args.neighbors,
                     "heads": 2, **({"memory_time": "event"} if protocol and protocol[2] == "event" else {})},
           "task": {"name": "temporal_link_prediction", "batch_events": args.batch, "negatives": 1,
                    "eval_negatives": args.eval_negatives,
                    **({"train_protocol": protocol[0], "eval_protocol": protocol[1]} if protocol else {})},
           "strategy": {"name": "memory", "minibatch": i, "epoch": j, "memory": k},
           "train": {"epochs": args.epochs, "threads": args.threads, "dtype": "float32", "lr": 1e-4, "seed": 0,
                     "device": args.device}}
    tag = (f"{name}-{config}-{'-'.join(protocol or ())}-{tree.name if tree else 'this'}"
           + (f"-copy{copy}" if copy is not None else "") + (f"-round{rnd}" if rnd else ""))
    recs = run_job(job, i * j * k, work, tag, tree)
    out = []
    for r in recs:
        ev = r["memory"]["eval_seconds"]
        out.append({"train_s": r["time"]["epoch"]["max"] - ev, "eval_s": ev, "loss": r["loss"],
                    **{key: r[key] for key in ("val_mrr", "test_mrr", "val_ap", "test_ap")}})
        where = ((f" @{tree.name}" if tree else "") + (f" (copy {copy})" if copy is not None else "")
                 + (f" (round {rnd})" if rnd else ""))
        print(f"  hpcdgnn {config}{where} epoch {r['epoch']}: train {out[-1]['train_s']:.1f} s, eval {ev:.1f} s, "
              f"loss {r['loss']:.4f}, test AP {r['test_ap']:.4f}, MRR {r['test_mrr']:.4f}", flush=True)
    return out


_CEILINGS: dict[tuple, float] = {}


def ceiling(data: Path, work: Path, name: str, P: int, args, protocol: tuple[str, str]) -> float:
    """The node's ceiling at P (as ``perf/scaling.py --ceiling``): P copies of the 1x1x1 run at once, no MPI
    between them; P · t(1) / t(slowest copy) with t(1) measured alone just before (once per P and protocol)."""
    from concurrent.futures import ThreadPoolExecutor

    if (name, P, protocol) in _CEILINGS:
        return _CEILINGS[(name, P, protocol)]
    alone = steady(run_hpcdgnn(data, work, name, "1x1x1", args, protocol=protocol, copy=100 * P), "train_s")
    with ThreadPoolExecutor(P) as pool:
        runs = list(pool.map(lambda c: run_hpcdgnn(data, work, name, "1x1x1", args, protocol=protocol,
                                                   copy=100 * P + 1 + c),
                             range(P)))
    _CEILINGS[(name, P, protocol)] = P * alone / max(steady(r, "train_s") for r in runs)
    return _CEILINGS[(name, P, protocol)]


def steady(recs: list[dict], key: str) -> float:
    """Mean of ``key`` over the epochs after the first (warm-up), or the only epoch."""
    return float(np.mean([r[key] for r in (recs[1:] or recs)]))


def median(rounds: list[list[dict]], key: str) -> float:
    """Median over ``--repeat``'s rounds of each round's :func:`steady` ``key``."""
    return float(np.median([steady(recs, key) for recs in rounds]))


def ratios(base: list[list[dict]], rounds: list[list[dict]], key: str) -> tuple[float, float, float]:
    """Median, min and max over the rounds of ``base``'s seconds over ``rounds``' in the same round (how many
    times faster ``rounds`` ran)."""
    r = [steady(b, key) / steady(x, key) for b, x in zip(base, rounds, strict=True)]
    return float(np.median(r)), min(r), max(r)


def main() -> None:
    """Prepare each input, run PyG and hpcdgnn on it, print one table per input."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", choices=["pyg"], required=True)
    ap.add_argument("--inputs", nargs="+", default=["college", "email", "jodie", "generated"],
                    choices=["college", "email", "jodie", "generated"])
    ap.add_argument("--max-events", type=int, default=None, help="keep the first N lines of each raw input")
    ap.add_argument("--generated-events", type=int, default=1_000_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--width", type=int, default=100, help="memory = time = embedding width (PyG's example: 100)")
    ap.add_argument("--neighbors", type=int, default=10)
    ap.add_argument("--batch", type=int, default=200, help="events per batch (PyG's example: 200)")
    ap.add_argument("--eval-negatives", type=int, default=49)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--configs", nargs="+", default=["1x1x1"], help="hpcdgnn's i×j×k layouts, IxJxK")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--before", type=Path, nargs="*", default=[],
                    help="other checkouts of hpcdgnn (git worktree add DIR COMMIT) whose 1x1x1 runs as extra rows")
    ap.add_argument("--eval-protocol", nargs="+", choices=["per_event", "per_batch"], default=["per_event"],
                    help="hpcdgnn's task.eval_protocol, one row set each (default per_event)")
    ap.add_argument("--train-protocol", nargs="+", choices=["per_event", "per_batch"], default=["per_event"],
                    help="hpcdgnn's task.train_protocol, one row set each (default per_event)")
    ap.add_argument("--memory-time", nargs="+", choices=["query", "event"], default=["query"],
                    help="hpcdgnn's model.memory_time, one row set each (default query)")
    ap.add_argument("--ceiling", action="store_true",
                    help="also run P copies of 1x1x1 at once per P of --configs (the node's ceiling, training "
                    "time) and print each config's training speed-up over 1x1x1 as a share of it")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of every row, alternating the rows within a round; medians and ratio ranges")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat: must be >= 1")
    os.environ.setdefault("OMPI_MCA_osc", "^ucx")
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; {args.threads} torch thread(s) per process; width {args.width}, {args.neighbors} "
          f"neighbours, 2 heads, batch {args.batch}, 1 training negative, {args.eval_negatives} evaluation negatives, "
          f"{args.epochs} epochs (the first is warm-up), float32, {args.device}")
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-tgn-pyg-") as tmp:
        work = Path(tmp)
        for name in args.inputs:
            if name == "generated":
                raw = generated_stream(work / "generated.txt", args.generated_events)
                data = work / "data-generated"
                proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "prepare", str(raw), "--format", "snap",
                                       "--kind", "events", "--output", str(data)], capture_output=True, text=True,
                                      cwd=REPO)
                if proc.returncode:
                    sys.exit(f"prepare generated failed:\n{proc.stderr[-2000:]}")
            else:
                data, _ = prepare(name, work, args.max_events)
            manifest = json.loads((data / "manifest.json").read_text())
            sp = manifest["split"]
            n_train = sp["train"][1] - sp["train"][0]
            n_eval = sp["test"][1] - sp["val"][0]
            print(f"\n{name}: N={manifest['num_vertices']} E={manifest['num_events']} "
                  f"D={manifest['edge_feature_dim']} bipartite={str(manifest['bipartite']).lower()} "
                  f"train/val+test={n_train}/{n_eval}", flush=True)
            rows: dict[str, list[list[dict]]] = {}  # label -> one list of epoch records per round
            first = _protocols(args)[0]  # the older tree's rows: the first protocols (keys only when not default)
            for rnd in range(args.repeat):
                rows.setdefault("pyg TGN", []).append(run_pyg(data, args))
                for tree in args.before:
                    rows.setdefault(f"hpcdgnn @{tree.name}", []).append(run_hpcdgnn(
                        data, work, name, "1x1x1", args, tree.resolve(),
                        None if first == ("per_event", "per_event", "query") else first, rnd=rnd))
                for protocol in _protocols(args):
                    for config in args.configs:
                        rows.setdefault(f"hpcdgnn {config}{_suffix(protocol, args)}", []).append(
                            run_hpcdgnn(data, work, name, config, args, protocol=protocol, rnd=rnd))
            spread = args.repeat > 1
            print(f"{'system':30s} {'train s':>8s} {'train ev/s':>10s} {'eval s':>7s} {'eval ev/s':>9s} "
                  f"{'loss':>7s} {'test AP':>7s} {'test MRR':>8s} {'train ×pyg':>{23 if spread else 10}s} "
                  f"{'eval ×pyg':>{22 if spread else 9}s}")
            base = rows["pyg TGN"]
            for label, rounds in rows.items():
                tr, evs = median(rounds, "train_s"), median(rounds, "eval_s")
                last = rounds[-1][-1]
                cells = []
                for key, width in (("train_s", 9), ("eval_s", 8)):
                    mid, lo, hi = ratios(base, rounds, key)
                    cells.append(f"{mid:{width}.2f}×" + (f" [{lo:.2f}–{hi:.2f}]" if spread else ""))
                print(f"{label:30s} {tr:8.1f} {n_train / tr:10.0f} {evs:7.1f} {n_eval / evs:9.0f} {last['loss']:7.4f} "
                      f"{last['test_ap']:7.4f} {last['test_mrr']:8.4f} {cells[0]} {cells[1]}", flush=True)
            if args.ceiling:
                _print_ceilings(rows, data, work, name, args)


def _print_ceilings(rows: dict, data: Path, work: Path, name: str, args) -> None:
    """Each configuration's training speed-up over 1x1x1 (same protocol) against the node's ceiling at its P."""
    print(f"{'configuration':30s} {'P':>2s} {'speed-up':>8s} {'ceiling':>7s} {'share':>6s}   (training, over 1x1x1)")
    for protocol in _protocols(args):
        suffix = _suffix(protocol, args)
        one = rows.get(f"hpcdgnn 1x1x1{suffix}")
        if one is None:
            print("  (no 1x1x1 row: add 1x1x1 to --configs)")
            return
        for config in args.configs:
            i, j, k = parse_config(config)
            if i * j * k == 1:
                continue
            top = ceiling(data, work, name, i * j * k, args, protocol)
            speed = ratios(one, rows[f"hpcdgnn {config}{suffix}"], "train_s")[0]
            label = f"hpcdgnn {config}{suffix}"
            print(f"{label:30s} {i * j * k:2d} {speed:7.2f}× {top:6.2f}× {speed / top:6.0%}",
                  flush=True)


def _protocols(args) -> list[tuple[str, str]]:
    """Every (train_protocol, eval_protocol, memory_time) asked for."""
    return [(tp, ep, mt) for tp in args.train_protocol for ep in args.eval_protocol for mt in args.memory_time]


def _suffix(protocol: tuple[str, str], args) -> str:
    """A row label's protocol part: empty when one combination runs."""
    if len(_protocols(args)) == 1:
        return ""
    return (f" t:{protocol[0].removeprefix('per_')} e:{protocol[1].removeprefix('per_')}"
            + (" m:event" if protocol[2] == "event" else ""))


if __name__ == "__main__":
    main()
