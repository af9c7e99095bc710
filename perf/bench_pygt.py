"""hpcdgnn in one process vs PyTorch Geometric Temporal: same models, same data, one thread (issue 5 item 4).

    python perf/bench_pygt.py [--pygt-path DIR ...] [--input ../shared/data/email-Eu-core-temporal.txt.gz]
                              [--snapshots 64] [--slicing events|time] [--epochs 8] [--warmup 3]
                              [--hidden 16] [--layers 2]
                              [--models evolvegcn_o cdgcn gconv_lstm tgcn_cell] [--cdgcn-pygt dygrae gclstm]
                              [--device cpu|cuda] [--repeat 1]
                              [--csv perf/results/pygt/pygt.csv [--plot perf/results/pygt/pygt.png]]

Prepares the SNAP file once (``hpcdgnn prepare --format snap``, default
features: raw in/out degree) into a temporary directory -- T slices of equal
event count by default, because email-Eu-core's timestamps have a gap and
``--slicing time`` (``--snapshots 64``) leaves 21 of 64 snapshots empty and
the validation split without edges -- then for every model runs

* hpcdgnn: ``python -m hpcdgnn run job.yaml`` in one process (no mpirun),
  ``train.threads: 1``, float32, ``link_prediction``, with glibc's malloc
  (or what ``LD_PRELOAD`` preloads); the epoch time is the
  median of the non-warm-up epochs in ``RUNDIR/metrics.jsonl`` (``train.warmup_epochs`` = ``--warmup``);
* PyGT: this script again (``--worker``) in a subprocess with
  ``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)`` and the ``--pygt-path``
  directories first on ``sys.path``; the epoch time is the median of the
  epochs after the first ``--warmup``, timed over the same span as hpcdgnn's (zero_grad,
  forward over the whole timeline, loss, backward, Adam step).

and prints s/epoch of both, the ratio PyGT / hpcdgnn, the loss of the last
epoch of both and the loss trajectories. The goal of issue 5: hpcdgnn at
least 3x faster per epoch at a comparable loss after the same epochs (issue
13's goals per counterpart: ``GOAL``).

``--device cuda`` trains both sides on the GPU (hpcdgnn's ``train.device``, the PyGT model, its
snapshots and pairs ``.to(device)``; the negatives are drawn on the host on both sides, as hpcdgnn
draws them), with the clock read after a ``torch.cuda.synchronize`` on both sides; the host keeps
one thread. The CSV's ``device`` column then holds the GPU's name.

``--csv FILE`` appends one row per pair of models (date, commit, device, data, both
sides' s/epoch with every run's, the ratio, the goal, the losses) to FILE --
created with a header if absent, never rewritten -- and ``--plot PNG`` then
draws the newest row of each (data, model, counterpart) in FILE as bars of
PyGT / hpcdgnn against their goals (``perf/results/pygt/``).

Same task on both sides
-----------------------
Both read the same prepared shards (the PyGT side through hpcdgnn's
``ShardReader``, for data only), so snapshots, features and targets are
identical. Step t scores the raw edges of snapshot t+1 from Z_t; ``negatives``
x as many uniform pairs per step from ``hpcdgnn.tasks.link_prediction.
draw_negatives_steps`` (the very pairs hpcdgnn draws, drawn as it draws them:
an epoch's steps in one call, inside the timed epoch on both sides); steps are split in time order by
``task.split`` (0.7/0.15/0.15); decoder ``Linear(2H, 16) -> ReLU -> Linear(16,
1)`` on [z_u ; z_v] (PyGT side: the plain gather-and-concatenate version);
loss = BCE-with-logits summed over the training pairs / their count; one
full-batch Adam step per epoch (lr 0.01) over all training steps; the steps
after the training horizon run forward without autograd on both sides (their
loss is computed, as hpcdgnn computes val/test metrics in the same pass).
hpcdgnn's A_t rows are source vertices and Ã = D^-1/2 (A+I) D^-1/2 with D from
the row sums; PyG aggregates into ``edge_index[1]``, so the PyGT side gets
the reversed edges with input self-loops removed, and PyG's ``gcn_norm``
then yields the same Ã. Inits differ (each library's own), so losses agree
in level, not in bits.

Models
------
* ``evolvegcn_o``: hpcdgnn's EvolveGCN-O (``layers`` layers, F -> H -> H, an
  LSTM evolves each W_t) vs ``layers`` x PyGT ``EvolveGCNO(H)`` with a ReLU
  after each. PyGT's layer is square (in = out channels) and evolves W_t with
  a GRU, not an LSTM; so a bias-free ``Linear(F, H)`` projects the features
  first (a reparametrisation of the first layer's weight). Ã is computed
  once per snapshot with ``gcn_norm`` outside the timing and passed with
  ``normalize=False`` (PyGT's option; by default the layer redoes
  ``gcn_norm`` in every call, which only makes PyGT slower: measure that
  with ``--pygt-renormalize``).
* ``cdgcn``: PyGT has no CD-GCN (relu([ÃX ; ÃXW]) then a per-vertex LSTM).
  ``--cdgcn-pygt`` picks the counterpart(s), each stacked ``layers`` times
  with width H, (H, C) carried along the timeline:
    - ``dygrae`` (default): ``DyGrEncoder`` = ``GatedGraphConv`` then a
      per-vertex ``nn.LSTM`` -- the same dataflow as CD-GCN (graph
      convolution of X_t, then an LSTM along each vertex's timeline). One
      gated-graph step, ``aggr="add"``, with Ã's weights as edge weights, so
      its message sum is Ã (X W) as in CD-GCN; a GRU cell then mixes it with
      X where CD-GCN concatenates.
    - ``gclstm`` (default): ``GCLSTM`` (GC-LSTM: dense W·X_t, Chebyshev graph
      convolution, K=2, on the hidden state in each of the 4 gates; PyG's
      ``ChebConv`` normalises the Laplacian in every call).
    - ``gconvlstm``: ``GConvLSTM`` (Chebyshev convolutions of X_t and H, K=2,
      8 per step).
  ``dygrae`` is the like-for-like row; ``gclstm`` is the GCN+LSTM cell PyGT
  offers under that name.
* ``gconv_lstm`` (issue 14): hpcdgnn's GConvLSTM (K = ``model.order`` = 2;
  the Chebyshev basis of X_t for all steps at once, of H_{t-1} once per step,
  one GEMM for the four gates) vs ``layers`` x PyGT ``GConvLSTM(K=2)`` (8
  ChebConvs per step, each renormalising the Laplacian), (H, C) carried.
* ``tgcn_cell`` (issue 14): hpcdgnn's T-GCN cell (Zhao et al.: Ã_t X_t in the
  GRU gates; Ã_t·X_t precomputed for the first layer, one GEMM for the three
  gates) vs ``layers`` x PyGT ``TGCN`` (3 GCNConvs per step, each redoing
  ``gcn_norm``), H carried.

Getting PyGT (for this benchmark only, never a project dependency)
------------------------------------------------------------------
The PyPI release ``torch-geometric-temporal`` 0.56.2 requires ``torch-sparse``
and ``torch-scatter`` (source builds against this torch) and its
``nn/recurrent/evolvegcno.py`` does ``from torch_sparse import SparseTensor``;
without them importing it fails with ``ModuleNotFoundError: No module named
'torch_sparse'``. The repository's newest source imports ``SparseTensor``
from ``torch_geometric.typing`` instead and needs neither, so put a clone on
the path together with a pure-Python ``torch_geometric`` installed apart from
the project (``--no-deps`` keeps pip from replacing this torch)::

    python -m pip install --no-deps --target /tmp/pygt-site torch_geometric xxhash psutil tqdm
    python -m pip install --target /tmp/pygt-site requests   # imported by torch_geometric.datasets
    git clone https://github.com/benedekrozemberczki/pytorch_geometric_temporal /tmp/pygt-src
    HPCDGNN_PYGT_PATH=/tmp/pygt-site:/tmp/pygt-src python perf/bench_pygt.py

(measured with torch_geometric 2.8.1 and pytorch_geometric_temporal at commit
adefe44, 2025-09-18). ``--pygt-path`` (default: ``$HPCDGNN_PYGT_PATH``, split
on ``os.pathsep``) goes on ``PYTHONPATH`` of the PyGT subprocess only.

Measured (2-core CI machine, shared with test runs, torch 2.13 CPU; ``--repeat 3
--cdgcn-pygt dygrae gclstm gconvlstm``; N=986, T=64): PyGT / hpcdgnn s/epoch =
1.13 EvolveGCN-O (0.104 vs 0.118 s; 1.46 with ``--pygt-renormalize``), 1.70
CD-GCN vs DyGrEncoder, 2.95 vs GCLSTM, 4.93 vs GConvLSTM; losses after 5
epochs 0.63-0.66 on both sides. At this size (986 vertices, ~2.3k edges per
snapshot) both sides are bound by per-operation overhead and the LSTM's
autograd, not by the sparse products or the decoder, so the 3x goal is not
met against the like-for-like layers.

With the compiled decoder loop (2026-11-24, ``hpcdgnn/ops/kernels.py``; same machine, partly loaded):
``--dataset`` email-Eu-core in 64 equal-event slices, ``--models evolvegcn_o --repeat 2``: EvolveGCN-O
0.0524 vs 0.1475 s (2.82x; 2.38x, 0.0686 s, with torch's decoder passes in the same hour); the
generator graph N = 2^15, T = 64 (``--dataset gen32k --models evolvegcn_o cdgcn --cdgcn-pygt dygrae
gconvlstm --epochs 3``): EvolveGCN-O 1.85 vs 4.80 s (2.60x; 1.62x before), CD-GCN 6.81 vs DyGrEncoder
15.26 s (2.24x) and vs GConvLSTM(K=2) 23.46 s (3.33x). EvolveGCN-O's epoch on gen32k is still half
decoder: 8.8 M training pairs at ~75 ns each in the backward, bound by the latency of random rows of
(2^21, 16) tables, which no kernel here hides; the 5x goal is not met.

With the compiled LSTM recurrence for EvolveGCN-O's weights (2026-11-24, second session; quiet machine):
``--dataset email64 --models evolvegcn_o --repeat 2``: 0.0471 vs 0.1600 s (3.39x; 0.0550 s, 2.86x, that
morning). Half of what is left is the decoder (forward ~14-34 ns, backward ~40-100 ns per pair on one
core, varying run to run).

Issue 14's cells (same machine, shared, ``--dataset`` email-Eu-core in 64
equal-event slices, ``--models gconv_lstm tgcn_cell --repeat 1``): PyGT /
hpcdgnn s/epoch = 5.36 GConvLSTM(K=2) (0.209 vs 1.119 s), 3.32 TGCN (0.141 vs
0.467 s); losses after 5 epochs 0.64 / 0.63 and 0.60 / 0.62.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the tree this script lives in is the one measured: first on this process's path (the recurrent floor, the
# worker's readers), and the working directory of every ``python -m hpcdgnn`` it starts (``-m`` puts the
# working directory before PYTHONPATH, so a run from another checkout would otherwise measure that one)
sys.path.insert(0, str(REPO))
DEFAULT_INPUT = REPO.parent / "shared" / "data" / "email-Eu-core-temporal.txt.gz"
#: issue 13's targets, PyGT / hpcdgnn s/epoch
GOAL = {"evolvegcno": 5.0, "dygrae": 2.0, "gconvlstm": 3.0, "gclstm": 3.0, "tgcn": 3.0}
PYGT_COUNTERPART = {"dygrae": "DyGrEncoder", "gclstm": "GCLSTM(K=2)", "gconvlstm": "GConvLSTM(K=2)",
                    "evolvegcno": "EvolveGCNO", "tgcn": "TGCN"}
#: the PyGT counterpart(s) of each hpcdgnn model (cdgcn's come from --cdgcn-pygt)
COUNTERPARTS = {"evolvegcn_o": ["evolvegcno"], "gconv_lstm": ["gconvlstm"], "tgcn_cell": ["tgcn"]}


def one_thread_env(extra_path: list[str] | None = None) -> dict[str, str]:
    """Environment of both sides: one OpenMP/MKL thread, Open MPI allowed as root, warnings off."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONWARNINGS="ignore")
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([*extra_path, str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def count_events(path: Path) -> int:
    """Data lines of a (possibly gzip-compressed) SNAP edge list."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rt") if gz else open(path)) as f:
        return sum(1 for line in f if line.strip() and line.lstrip()[0] not in "#%")


def prepare(data: Path, src: Path, snapshots: int, slicing: str) -> None:
    """``hpcdgnn prepare --format snap``: T equal-time slices, or T slices of equal event count."""
    if slicing == "time":
        how = ["--snapshots", str(snapshots)]
    else:
        how = ["--events-per-snapshot", str(math.ceil(count_events(src) / snapshots))]
    subprocess.run([sys.executable, "-m", "hpcdgnn", "prepare", str(src), "--format", "snap", *how,
                    "--output", str(data)], check=True, stdout=subprocess.DEVNULL, env=one_thread_env(), cwd=REPO)
    os.sync()


def run_hpcdgnn(work: Path, data: Path, model: str, args, tag: str) -> dict:
    """One ``python -m hpcdgnn run`` in one process; median steady epoch seconds and the losses."""
    import yaml

    job = work / f"{model}.yaml"
    job.write_text(yaml.safe_dump({
        "data": {"path": str(data)},
        "model": {"name": model, "hidden": args.hidden, "layers": args.layers},
        "task": {"name": "link_prediction", "negatives": args.negatives, "decoder_hidden": args.decoder_hidden},
        "train": {"epochs": args.epochs, "lr": args.lr, "seed": args.seed, "threads": 1, "dtype": "float32",
                  "warmup_epochs": args.warmup, "device": args.device},
    }))
    out = work / f"run-{model}-{tag}"
    proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(out)],
                          capture_output=True, text=True, env=one_thread_env(), cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"hpcdgnn {model} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = [r["time"]["epoch"]["max"] for r in recs if not r["warmup"]] or [recs[-1]["time"]["epoch"]["max"]]
    summary = json.loads((out / "summary.json").read_text())
    return {"epoch_s": statistics.median(steady), "losses": [r["loss"] for r in recs],
            "params": summary["parameters"]["count"], "device": summary["environment"]["device"]}


def run_pygt(data: Path, model: str, counterpart: str, args, pygt_path: list[str]) -> dict:
    """The PyGT side in a one-thread subprocess with ``pygt_path`` on its ``sys.path``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", counterpart, "--data", str(data)]
    for k in ("epochs", "warmup", "hidden", "layers", "negatives", "decoder_hidden", "lr", "seed", "device"):
        cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    cmd += ["--pygt-renormalize"] if args.pygt_renormalize else []
    proc = subprocess.run(cmd, capture_output=True, text=True, env=one_thread_env(pygt_path))
    if proc.returncode != 0:
        sys.exit(f"PyGT {model}/{counterpart} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sync(device) -> None:
    """Wait for the device's queued kernels (a no-op on the CPU), so a host clock times them."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, repeat: int, device, warmup: int = 1) -> float:
    """Median seconds of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones, each between two
    :func:`sync` of ``device`` (the kernels' time, not their launch)."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def recurrent_floor(data: Path, model: str, args) -> dict:
    """Forward + backward of the model's time encoders alone over the same rows and steps (issue 13 item 2),
    in this process with one thread: torch's own module (``nn.LSTM`` / ``nn.LSTMCell`` loop) and the
    scan of :mod:`hpcdgnn.ops.scan` (hpcdgnn runs torch's ``nn.LSTM`` for CD-GCN, the scan for
    EvolveGCN-O's weight recurrence); median of ``args.floor_repeat`` runs, seconds.
    """
    import torch

    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.nn.models.base import build_model
    from hpcdgnn.ops.scan import run_torch_rnn, self_fed_lstm

    torch.set_num_threads(1)
    m = load_manifest(data)
    dev = torch.device(args.device)
    net = build_model(model, m.num_features, args.hidden, args.layers, 1).to(dev)
    T, N = m.num_snapshots, m.num_vertices
    torch.manual_seed(0)

    def floor(fn) -> float:
        return timed(fn, args.floor_repeat, dev)

    torch_s = ours_s = 0.0
    for layer in net.layers:
        rnn = layer.rnn()
        if rnn is not None:
            y = torch.randn(T, N, layer.spatial_features, device=dev, requires_grad=True)
            torch_s += floor(lambda: rnn(y)[0].sum().backward())
            ours_s += floor(lambda: run_torch_rnn(rnn, y)[0].sum().backward())
        elif hasattr(layer, "cell"):  # EvolveGCN-O: T steps of the LSTM over the weight rows
            cell, w0 = layer.cell, layer.w0

            def loop():
                w, c, out = w0, torch.zeros_like(w0), []
                for _ in range(T):
                    w, c = cell(w, (w, c))
                    out.append(w)
                torch.stack(out).sum().backward()

            torch_s += floor(loop)
            ours_s += floor(lambda: self_fed_lstm(cell, w0, torch.zeros_like(w0), T)[0].sum().backward())
    return {"torch_s": torch_s, "ours_s": ours_s}


# --------------------------------------------------------------------------------------------------------------
# the PyGT side (runs only in the --worker subprocess: the main process never imports torch_geometric)


def worker(args) -> None:
    """Train one PyGT model on the prepared shards; print one JSON line (epoch seconds, losses, versions)."""
    import numpy as np
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    try:
        import torch_geometric
        import torch_geometric_temporal
        from torch_geometric.nn.conv.gcn_conv import gcn_norm
        from torch_geometric_temporal.nn.recurrent import GCLSTM, TGCN, DyGrEncoder, EvolveGCNO, GConvLSTM
    except ImportError as e:
        sys.exit(f"cannot import PyTorch Geometric Temporal ({type(e).__name__}: {e}); give --pygt-path or "
                 "HPCDGNN_PYGT_PATH (see this script's docstring)")
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.data.snapshot import csr_rows
    from hpcdgnn.metrics.summary import device_name
    from hpcdgnn.ops.negatives import draw_negatives_steps
    from hpcdgnn.tasks.base import split_steps

    m = load_manifest(args.data)
    N, T, Fin, H = m.num_vertices, m.num_snapshots, m.num_features, args.hidden
    dev = torch.device(args.device)
    snaps, targets = [], {}
    with ShardReader(args.data, m) as reader:
        for t in range(T):
            s = reader.read(t)
            rows, cols = csr_rows(s.indptr), s.indices.astype(np.int64)
            keep = rows != cols  # Ã adds I itself (hpcdgnn drops input self-loops the same way)
            # reversed: PyG sums messages into edge_index[1], hpcdgnn's row u sums over u's out-edges
            ei = torch.from_numpy(np.stack([cols[keep], rows[keep]])).to(dev)
            ew = torch.from_numpy(s.weights[keep].astype(np.float32)).to(dev)
            ei_n, ew_n = gcn_norm(ei, ew, N, add_self_loops=True)  # Ã once per snapshot, outside the timing
            snaps.append((torch.from_numpy(s.x.astype(np.float32)).to(dev), ei, ew, ei_n, ew_n))
            if t + 1 < T:
                src, dst = reader.read_target(t + 1)
                targets[t] = (torch.from_numpy(src).to(dev), torch.from_numpy(dst).to(dev))
    ranges = split_steps(T - 1, (0.7, 0.15, 0.15))
    horizon = ranges[0].stop - 1
    train_count = float(sum(m.snapshot_edges[t + 1] for t in ranges[0]) * (1 + args.negatives))

    torch.manual_seed(args.seed)
    kind = args.worker

    class Net(nn.Module):
        """``layers`` stacked PyGT recurrent layers; ``step`` maps snapshot t and the carried state to Z_t."""

        def __init__(self) -> None:
            super().__init__()
            dims = [Fin] + [H] * args.layers
            if kind == "evolvegcno":
                self.proj = nn.Linear(Fin, H, bias=False)  # PyGT's EvolveGCNO is square: F -> H first
                # normalize=False: Ã comes precomputed; PyGT's default redoes gcn_norm in every call
                self.layers = nn.ModuleList([EvolveGCNO(H, normalize=args.pygt_renormalize)
                                             for _ in range(args.layers)])
            elif kind == "dygrae":
                self.layers = nn.ModuleList([DyGrEncoder(conv_out_channels=H, conv_num_layers=1, conv_aggr="add",
                                                         lstm_out_channels=H, lstm_num_layers=1)
                                             for _ in range(args.layers)])
            elif kind == "gclstm":
                self.layers = nn.ModuleList([GCLSTM(dims[i], H, K=2) for i in range(args.layers)])
            elif kind == "tgcn":  # PyGT's defaults: improved=False, cached=False, add_self_loops=True
                self.layers = nn.ModuleList([TGCN(dims[i], H) for i in range(args.layers)])
            else:
                self.layers = nn.ModuleList([GConvLSTM(dims[i], H, K=2) for i in range(args.layers)])

        def start(self) -> list:
            if kind == "evolvegcno":
                for layer in self.layers:
                    layer.reinitialize_weight()  # else W_t of the previous epoch (and its graph) carries over
            return [(None, None)] * len(self.layers)

        def step(self, t: int, state: list) -> tuple[torch.Tensor, list]:
            x, ei, ew, ei_n, ew_n = snaps[t]
            if kind == "evolvegcno":
                h = self.proj(x)
                for layer in self.layers:
                    h = torch.relu(layer(h, ei, ew) if args.pygt_renormalize else layer(h, ei_n, ew_n))
                return h, state
            h, new = x, []
            for layer, (hs, cs) in zip(self.layers, state, strict=True):
                if kind == "dygrae":
                    h, hs, cs = layer(h, ei_n, ew_n, hs, cs)
                elif kind == "tgcn":
                    hs = h = layer(h, ei, ew, hs)
                else:
                    hs, cs = layer(h, ei, ew, hs, cs)
                    h = hs
                new.append((hs, cs))
            return h, new

    class Decoder(nn.Module):
        """``Linear(2H, dh) -> ReLU -> Linear(dh, 1)`` on the concatenated endpoint embeddings."""

        def __init__(self) -> None:
            super().__init__()
            self.lin1, self.lin2 = nn.Linear(2 * H, args.decoder_hidden), nn.Linear(args.decoder_hidden, 1)

        def forward(self, z, src, dst):
            return self.lin2(torch.relu(self.lin1(torch.cat([z[src], z[dst]], dim=1)))).squeeze(-1)

    net, dec = Net().to(dev), Decoder().to(dev)
    params = [*net.parameters(), *dec.parameters()]
    opt = torch.optim.Adam(params, lr=args.lr)

    def negatives(epoch: int) -> dict:
        """hpcdgnn's negatives, pair for pair, drawn as it draws them: all steps of the epoch in one call."""
        steps = sorted(targets)
        counts = [targets[t][0].shape[0] * args.negatives for t in steps]
        return dict(zip(steps, draw_negatives_steps(args.seed, epoch, steps, N, counts), strict=True))

    def pairs(t: int, neg: np.ndarray):
        ps, pd = targets[t]
        nd = torch.from_numpy(neg).to(dev)  # drawn on the host, as hpcdgnn draws them
        src, dst = torch.cat([ps, nd[0]]), torch.cat([pd, nd[1]])
        label = torch.cat([torch.ones(ps.shape[0], device=dev), torch.zeros(neg.shape[1], device=dev)])
        return src, dst, label

    times, losses, evals = [], [], []
    for epoch in range(1, args.epochs + 1):
        sync(dev)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        state = net.start()
        loss_sum = torch.zeros((), device=dev)
        eval_sum, eval_n = 0.0, 0
        negs = negatives(epoch)
        for t in range(T):
            with torch.set_grad_enabled(t <= horizon):
                z, state = net.step(t, state)
                if t in targets:
                    src, dst, label = pairs(t, negs[t])
                    loss = F.binary_cross_entropy_with_logits(dec(z, src, dst), label, reduction="sum")
                    if t in ranges[0]:
                        loss_sum = loss_sum + loss
                    else:
                        eval_sum, eval_n = eval_sum + float(loss), eval_n + label.shape[0]
        loss = loss_sum / train_count
        loss.backward()
        opt.step()
        sync(dev)  # as hpcdgnn's epoch timer: the kernels' time, not their launch
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
        evals.append(eval_sum / eval_n if eval_n else None)
    print(json.dumps({
        "epoch_s": statistics.median(times[args.warmup:] or times), "times": times, "losses": losses,
        "eval_losses": evals,
        "params": sum(p.numel() for p in params), "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__, "pygt": os.path.dirname(torch_geometric_temporal.__file__),
        "device": device_name(dev),  # as hpcdgnn's summary.json names it
    }))


# --------------------------------------------------------------------------------------------------------------


def main() -> None:
    """Prepare once, run every (model, counterpart) on both sides, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pygt-path", nargs="*", default=None,
                    help="directories for the PyGT subprocess's sys.path (default: $HPCDGNN_PYGT_PATH)")
    ap.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    ap.add_argument("--generate", nargs=3, metavar=("N", "T", "DENSITY"), default=None,
                    help="instead of --input: the generator graph (hpcdgnn generate --vertices N --snapshots T "
                         "--density DENSITY --seed 1), read through the same shards by both sides")
    ap.add_argument("--dataset", type=Path, default=None,
                    help="instead of --input: an already prepared hpcdgnn dataset directory")
    ap.add_argument("--floor-repeat", type=int, default=3, help="runs of the recurrent-floor timing (median)")
    ap.add_argument("--snapshots", type=int, default=64)
    ap.add_argument("--slicing", choices=["events", "time"], default="events",
                    help="T slices of equal event count (default), or equal time (email-Eu-core then has 21 empty "
                         "snapshots, so an empty validation split)")
    ap.add_argument("--epochs", type=int, default=8, help="epochs per run")
    ap.add_argument("--warmup", type=int, default=3,
                    help="leading epochs left out of the median on both sides: on a large graph the first ones "
                         "page-fault the allocator's memory in (gen32k: 2-3x the steady time in epoch 2, "
                         "perf/results/rnn-rows/s32_lstm_warm.log); before 2026-11-28 this was 1")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--negatives", type=int, default=1)
    ap.add_argument("--decoder-hidden", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", nargs="+", choices=["evolvegcn_o", "cdgcn", "gconv_lstm", "tgcn_cell"],
                    default=["evolvegcn_o", "cdgcn"])
    ap.add_argument("--cdgcn-pygt", nargs="+", choices=["dygrae", "gclstm", "gconvlstm"],
                    default=["dygrae", "gconvlstm"],
                    help="PyGT counterpart(s) of CD-GCN, one row each")
    ap.add_argument("--pygt-renormalize", action="store_true",
                    help="EvolveGCNO as shipped (normalize=True: gcn_norm in every call) instead of precomputed Ã")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where both sides train (train.device / .to(device)); host threads stay at 1")
    ap.add_argument("--repeat", type=int, default=1, help="runs per side, alternating; the fastest counts")
    ap.add_argument("--csv", type=Path, default=None, help="append the results to this CSV (header if new)")
    ap.add_argument("--plot", type=Path, default=None, help="with --csv: bar chart of the CSV's newest rows (PNG)")
    ap.add_argument("--worker", choices=["evolvegcno", "dygrae", "gclstm", "gconvlstm", "tgcn"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plot is not None and args.csv is None:
        ap.error("--plot draws the rows of --csv FILE; give --csv too")
    if not 0 <= args.warmup < args.epochs:
        ap.error(f"--warmup {args.warmup}: must leave at least one of --epochs {args.epochs} to time")
    if args.worker:
        worker(args)
        return
    pygt_path = args.pygt_path
    if pygt_path is None:
        pygt_path = [p for p in os.environ.get("HPCDGNN_PYGT_PATH", "").split(os.pathsep) if p]
    pygt_path = [str(Path(p).resolve()) for p in pygt_path]
    args.input = args.input.resolve()  # the runs start in the repository (REPO)
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-pygt-") as tmp:
        work = Path(tmp)
        data = work / "data"
        if args.dataset:
            data, source = args.dataset.resolve(), args.dataset.name
        elif args.generate:
            n, t, f = args.generate
            subprocess.run([sys.executable, "-m", "hpcdgnn", "generate", "--output", str(data), "--vertices", n,
                            "--snapshots", t, "--density", f, "--seed", "1"], check=True, stdout=subprocess.DEVNULL,
                           env=one_thread_env(), cwd=REPO)
            source = f"generator N={n} T={t} density={f}"
        else:
            prepare(data, args.input, args.snapshots, args.slicing)
            source = f"{args.input.name} ({args.slicing} slicing)"
        man = json.loads((data / "manifest.json").read_text())
        # the floor times torch RNN time encoders; the graph-RNN cells have none (their gates convolve)
        floors = {model: recurrent_floor(data, model, args) for model in args.models
                  if model in ("evolvegcn_o", "cdgcn")}
        rows = []
        for model in args.models:
            for cp in COUNTERPARTS.get(model, args.cdgcn_pygt):
                ours, theirs = [], []
                for rep in range(args.repeat):  # alternate the sides so a slow spell of this machine hits both
                    ours.append(run_hpcdgnn(work, data, model, args, f"{cp}-r{rep}"))
                    theirs.append(run_pygt(data, model, cp, args, pygt_path))
                best = min(ours, key=lambda r: r["epoch_s"]), min(theirs, key=lambda r: r["epoch_s"])
                if best[0]["device"] != best[1]["device"]:  # the CSV's device column must hold for both sides
                    sys.exit(f"{model}/{cp}: hpcdgnn trained on {best[0]['device']}, PyGT on {best[1]['device']}")
                best[0]["runs"], best[1]["runs"] = [r["epoch_s"] for r in ours], [r["epoch_s"] for r in theirs]
                rows.append((model, cp, *best))
        info = theirs[-1]
        empty = sum(1 for e in man["snapshot_edges"] if e == 0)
        print(f"data: {source}, N={man['num_vertices']} T={man['num_snapshots']} F={man['num_features']} "
              f"({empty} empty snapshots, {sum(man['snapshot_edges'])} edges); "
              f"link prediction, hidden {args.hidden}, {args.layers} layers, decoder {args.decoder_hidden}, "
              f"negatives {args.negatives}, Adam lr {args.lr}, float32, 1 host thread, {info['device']}")
        norm = "normalize=True (gcn_norm every call)" if args.pygt_renormalize else "on precomputed Ã"
        print(f"PyGT: torch_geometric {info['torch_geometric']}, torch_geometric_temporal from {info['pygt']}; "
              f"torch {info['torch']}; EvolveGCNO {norm}; {args.epochs} epochs, s/epoch = median of epochs "
              f"{args.warmup + 1}..{args.epochs}" + (f", fastest of {args.repeat} runs" if args.repeat > 1 else ""))
        print(f"{'hpcdgnn model':13s} {'PyGT model':15s} {'hpcdgnn s/ep':>12s} {'PyGT s/ep':>10s} "
              f"{'PyGT/hpcdgnn':>12s} {'goal':>5s} {'hpcdgnn loss':>12s} {'PyGT loss':>10s} {'params':>11s}")
        for model, cp, o, p in rows:
            ratio = p["epoch_s"] / o["epoch_s"]
            goal = GOAL[cp]
            print(f"{model:13s} {PYGT_COUNTERPART[cp]:15s} {o['epoch_s']:12.4f} {p['epoch_s']:10.4f} {ratio:12.2f} "
                  f"{goal:4.0f}x {o['losses'][-1]:12.4f} {p['losses'][-1]:10.4f} {o['params']:>5d}/{p['params']:<5d}"
                  f"  {'met' if ratio >= goal else 'not met'}")
        if floors:
            print("recurrent floor (time encoders alone, forward + backward over the same rows and steps, 1 thread; "
                  "goal: epoch <= 1.5x floor):")
        for model in floors:
            fl, epoch_s = floors[model], min(o["epoch_s"] for m_, _, o, _ in rows if m_ == model)
            print(f"  {model:13s} torch module {fl['torch_s']:.4f} s, nn/recurrent scan {fl['ours_s']:.4f} s; "
                  f"epoch {epoch_s:.4f} s = {epoch_s / fl['torch_s']:.2f}x the torch floor, "
                  f"{epoch_s / fl['ours_s']:.2f}x the scan's")
        print("train loss per epoch (before that epoch's update):")
        for model, cp, o, p in rows:
            fmt = lambda xs: " ".join(f"{x:.4f}" for x in xs)  # noqa: E731
            print(f"  {model:13s} hpcdgnn {fmt(o['losses'])}")
            print(f"  {'':13s} {PYGT_COUNTERPART[cp]:15s} {fmt(p['losses'])}")
        if args.csv is not None:
            append_csv(args.csv, rows, source, man, args)
            print(f"appended {len(rows)} rows to {args.csv}")
            if args.plot is not None:
                plot_csv(args.csv, args.plot)
                print(f"plot: {args.plot}")


CSV_FIELDS = ["date", "commit", "device", "data", "N", "T", "model", "pygt_model", "hpcdgnn_s", "pygt_s", "ratio",
              "goal", "met", "hpcdgnn_runs_s", "pygt_runs_s", "hpcdgnn_loss", "pygt_loss", "epochs", "repeat"]


def append_csv(path: Path, rows: list, source: str, man: dict, args) -> None:
    """Append one row per (model, counterpart) to ``path``, with a header when the file is new."""
    import csv
    import datetime

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with path.open() as fh:
            header = fh.readline().strip().split(",")
        if header != CSV_FIELDS:  # appending under other columns would shift every value
            sys.exit(f"{path}: its columns are {header}, this script writes {CSV_FIELDS}; give another --csv")
    with path.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        if new:
            w.writeheader()
        for model, cp, o, p in rows:
            ratio = p["epoch_s"] / o["epoch_s"]
            w.writerow({
                "date": date, "commit": commit + ("+dirty" if dirty else ""), "device": p.get("device", "cpu"),
                "data": source,
                "N": man["num_vertices"], "T": man["num_snapshots"], "model": model, "pygt_model": PYGT_COUNTERPART[cp],
                "hpcdgnn_s": f"{o['epoch_s']:.4f}", "pygt_s": f"{p['epoch_s']:.4f}", "ratio": f"{ratio:.2f}",
                "goal": GOAL[cp], "met": ratio >= GOAL[cp],
                "hpcdgnn_runs_s": " ".join(f"{x:.4f}" for x in o["runs"]),
                "pygt_runs_s": " ".join(f"{x:.4f}" for x in p["runs"]),
                "hpcdgnn_loss": f"{o['losses'][-1]:.4f}", "pygt_loss": f"{p['losses'][-1]:.4f}",
                "epochs": args.epochs, "repeat": args.repeat,
            })


def newest_rows(path: Path) -> dict[tuple[str, str, str, str], dict]:
    """The last row of each (device, data, model, counterpart) in the CSV ``path``: rows are appended in time
    order."""
    import csv

    newest: dict[tuple[str, str, str, str], dict] = {}
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            newest[(r.get("device", "cpu"), r["data"], r["model"], r["pygt_model"])] = r  # later rows replace earlier
    return newest


def plot_csv(path: Path, png: Path) -> None:
    """Bars of PyGT / hpcdgnn, the newest row of each (device, data, model, counterpart) in ``path``, goals as
    ticks."""
    import matplotlib

    matplotlib.use("Agg")  # batch nodes have no display
    import matplotlib.pyplot as plt

    newest = newest_rows(path)
    keys = sorted(newest)
    ratios = [float(newest[k]["ratio"]) for k in keys]
    goals = [float(newest[k]["goal"]) for k in keys]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(keys)), 4.0))
    x = range(len(keys))
    ax.bar(x, ratios, color=["tab:green" if r >= g else "tab:orange" for r, g in zip(ratios, goals, strict=True)])
    ax.scatter(x, goals, marker="_", s=900, color="black", label="goal", zorder=3)
    for i, r in enumerate(ratios):
        ax.text(i, r, f"{r:.2f}x", ha="center", va="bottom", fontsize=8)
    short = lambda dev: dev.removeprefix("NVIDIA ").split()[0]  # noqa: E731  ("H100"), a tick label's width
    ax.set_xticks(list(x), [f"{m}\nvs {c}\n{d}\n{short(dev)}" for dev, d, m, c in keys], fontsize=7)
    ax.set_ylabel("PyGT s/epoch / hpcdgnn s/epoch")
    ax.set_title("hpcdgnn vs PyTorch Geometric Temporal, 1 host thread", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
