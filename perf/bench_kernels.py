"""The compiled kernels of another revision against this tree's, in one process (issue 13 item 1); and each
kernel's share of whole epochs against the plain-torch path (issue 57 item 3, ``--rule``).

    python perf/bench_kernels.py --before REV --job JOB.yaml [--epochs 120] [--set KEY=VALUE ...]
    python perf/bench_kernels.py --before REV --micro [--repeat 12]
    python perf/bench_kernels.py --rule [--jobs NAME ...] [--repeat 3] [--checks torch progress allocator]
                                 [--tree DIR] [--data DIR]

Why one process: this VM's speed varies from process to process (the same one-rank job 18.8-30.2 ms an
epoch from run to run, pinned or not), while the epochs of one run agree to a few per cent; a kernel
change of 5-10 % is lost between two runs. So REV's ``hpcdgnn/ops/_numba_kernels.py`` (``git show``) is
loaded beside this tree's, and

* ``--job``: one ``hpcdgnn run`` of the job (one rank, through ``hpcdgnn.__main__``, with its allocator
  restart) trains with REV's kernels on odd epochs and this tree's on even ones; the first four epochs
  (compilation, warm-up) are dropped. Prints the median epoch of each and new / old.
* ``--micro``: each decoder kernel on random arrays (N = 986 and 2^15 rows, hidden 16) and the LSTM
  recurrence (T = 64, H = 16, B = 2 and 16), the two modules alternating call by call (:func:`time_calls`:
  two untimed calls each, then ``--repeat`` samples each the median of as many calls as fill
  :data:`SAMPLE_S`); prints ns a pair / us a call and how far their outputs part (relative to the largest).

A kernel REV defines with fewer trailing arguments than this tree passes (a flag added since) is called
without them. Only the compiled module differs between the two halves: the Python around it is this
tree's.

``--rule``: the rule of issue 57 — an accelerated path stays only where it makes a whole epoch of a benchmark
job >= 1.3x (:data:`RULE`) faster than the plain-torch path, measured side by side in one run. Real data
(email-Eu-core in 64, 256 or 1024 slices of equal event count, CollegeMsg's first 15,000 events; from
``--data``, default ``../shared/data``, CollegeMsg also from ``inputs/``) prepared once; for every job of
:data:`JOBS` one ``hpcdgnn run`` (one rank, through this script's worker) whose epochs cycle through the
variants — ``all`` (the default, every kernel compiled), ``torch`` (every kernel skipped:
``HPCDGNN_KERNELS_SKIP``, :func:`hpcdgnn.ops.kernels.skipped`), ``-K`` (all but kernel K, its siblings with it)
and, for the jobs whose recurrence is the hand-written BPTT of ``hpcdgnn/ops/scan.py``, ``bptt=torch``
(torch's own LSTM in its place, patched in here: EvolveGCN-O's weight recurrence as ``nn.LSTMCell`` called
step by step, the chunk strategy's padded lanes through the layer's ``nn.LSTM``) — in rounds, in order and
then reversed (ABBA..., :func:`_variant_of`), so a slow spell of this shared machine hits every variant alike;
the first round (compilation, warm-up) is dropped, each variant's median of the other ``--repeat`` rounds
counts (the run's slowest-rank epoch time, metrics.jsonl).
Prints per job and variant the median epoch, the ratio to ``all`` (``torch``: the whole epoch's speed-up by
the kernels; ``-K``: K's marginal one) and the kernels each variant called per epoch; then per kernel the
jobs that call it in their epochs and its marginal ratios, keep (>= 1.3 in some job) or delete. ``--checks``
run in processes of their own, each pair ABAB ``--repeat`` times (median of all steady epochs):
``torch`` — ``HPCDGNN_KERNELS=numba`` against ``=torch`` (the module never loaded), on ``--torch-jobs``;
``progress`` — ``comm.progress: calls`` against ``thread`` (a progress thread exists only at P > 1: P = 2,
``strategy.overlap_chunks`` 4 and ``comm.grad_buckets`` 4, so there is something for it to move);
``allocator`` — jemalloc preloaded (``LD_PRELOAD``, ``MALLOC_CONF`` as hpcdgnn/allocator.py's re-exec set it, and
``HPCDGNN_MALLOC=auto`` for a tree that still re-execs) against glibc's (``HPCDGNN_MALLOC=system``) at P = 1 and 2.
The decoder's three kernels (``edge_mlp_forward``, ``edge_bce_train``, ``score_stats``) are asked for through
:func:`hpcdgnn.ops.kernels.available` without their name (hpcdgnn/tasks/link_prediction.py), so the switch
skips them together; the worker here names each by its call site (:data:`DECODER_SITES`) to time them apart.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import importlib.util
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODULE = "hpcdgnn/ops/_numba_kernels.py"


class _Shim:
    """REV's module, each kernel called with at most as many positional arguments as it takes."""

    def __init__(self, module) -> None:
        self.module = module

    def __getattr__(self, name: str):
        fn = getattr(self.module, name)
        py = getattr(fn, "py_func", None)
        if py is None:
            return fn
        takes = len(inspect.signature(py).parameters)
        return lambda *args: fn(*args[:takes])


def load_before(rev: str, where: Path) -> _Shim:
    """REV's compiled-kernel module, written to ``where`` and imported under its own name."""
    src = subprocess.run(["git", "show", f"{rev}:{MODULE}"], cwd=REPO, capture_output=True, text=True)
    if src.returncode != 0:
        sys.exit(f"perf/bench_kernels.py: git show {rev}:{MODULE}: {src.stderr.strip()}")
    path = where / "_kernels_before.py"
    path.write_text(src.stdout)
    spec = importlib.util.spec_from_file_location("_kernels_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _Shim(module)


def epochs_ab(before: _Shim, job: str, epochs: int, sets: list[str]) -> None:
    """One training run, REV's kernels on odd epochs and this tree's on even ones."""
    import hpcdgnn.ops._numba_kernels as now
    import hpcdgnn.train.trainer as trainer
    from hpcdgnn.__main__ import main
    from hpcdgnn.ops import kernels

    times: dict[str, list[float]] = {"before": [], "now": []}
    train_epoch = trainer.train_epoch

    def alternating(run, task, epoch, meter, stop=None):
        which = "before" if epoch % 2 else "now"
        kernels._compile()
        kernels._kernels = before if which == "before" else now
        t0 = time.perf_counter()
        out = train_epoch(run, task, epoch, meter, stop)
        if epoch > 4:
            times[which].append(time.perf_counter() - t0)
        return out

    trainer.train_epoch = alternating
    sys.argv = ["hpcdgnn", "run", job, "--set", f"train.epochs={epochs}", *[a for s in sets for a in ("--set", s)]]
    try:
        main()
    except SystemExit as stop:
        if stop.code:
            raise
    if not times["now"] or not times["before"]:
        sys.exit("perf/bench_kernels.py: too few epochs to compare (the first four are dropped)")
    old, new = float(np.median(times["before"])), float(np.median(times["now"]))
    print(f"epoch (median of {len(times['before'])} / {len(times['now'])}): before {old * 1e3:.2f} ms, "
          f"now {new * 1e3:.2f} ms, now / before {new / old:.3f}")


def _relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over max |a|: how far two kernels' outputs part, at the outputs' scale."""
    return float(np.abs(a - b).max() / max(float(np.abs(a).max()), np.finfo(np.float64).tiny))


#: --micro: a timed sample is the median of as many calls as fill this many seconds (one call at least)
SAMPLE_S = 0.05


def _touched(args: tuple) -> tuple:
    """``args`` with every page of their writable arrays written (each page's first byte, to itself): a fresh
    array's pages are mapped at their first write, which would otherwise fall inside the timed call."""
    for a in args:
        if isinstance(a, np.ndarray) and a.nbytes and a.flags.writeable and a.flags.c_contiguous:
            b = a.reshape(-1).view(np.uint8)
            b[::4096] = b[::4096]
    return args


def time_calls(calls: dict[str, Callable], fresh: Callable[[], tuple], repeat: int, sample_s: float = SAMPLE_S,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, tuple[float, tuple, int]]:
    """Per side of ``calls`` (one kernel of each module): seconds a call, the arguments of its last call, and the
    calls K a sample took.

    Each call gets fresh arguments (``fresh()``, the side's previous ones freed first, pages touched:
    :func:`_touched`) outside the clock. Two untimed calls a side: the first compiles, the second is the first
    after the other side's compilation and gives K = ``sample_s`` / its time (at least 2, the same for both
    sides). Then ``repeat`` samples a side, each the median of K calls, the sides alternating call by call (ABAB:
    every timed call follows one of the other side's), with the collector off; the result is the median of the
    samples. Why: on a shared machine a call now and then waits out another process's scheduler slice (3-4 ms,
    15x a 280 us LSTM call), so a sample of one call could be such a call, and at ``--repeat 1`` that sample is
    the figure; pages first written inside the clock would count the kernel's page faults (one side's only,
    where the other side's freed arrays are reused)."""
    names = list(calls)
    last: dict[str, tuple] = {}

    def one(name: str) -> float:
        last.pop(name, None)
        args = _touched(fresh())
        t0 = clock()
        calls[name](*args)
        seconds = clock() - t0
        last[name] = args
        return seconds

    for name in names:
        one(name)
    K = max(2, math.ceil(sample_s / max(min(one(name) for name in names), 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            times: dict[str, list[float]] = {name: [] for name in names}
            for _ in range(K):
                for name in names:
                    times[name].append(one(name))
            for name in names:
                samples[name].append(float(np.median(times[name])))
    finally:
        if was:
            gc.enable()
    return {name: (float(np.median(samples[name])), last[name], K) for name in names}


def micro(before: _Shim, repeat: int) -> None:
    """Each kernel on random arrays, the two modules alternating (:func:`time_calls`)."""
    import hpcdgnn.ops._numba_kernels as now

    rng = np.random.default_rng(0)
    f32 = np.float32

    def timed(calls: dict, fresh) -> dict[str, tuple[float, tuple, int]]:
        return time_calls(calls, fresh, repeat)

    for n, pairs in ((986, 200_000), (1 << 15, 2_000_000)):
        H = 16
        pu, pv = rng.standard_normal((n, H)).astype(f32), rng.standard_normal((n, H)).astype(f32)
        b1, w2 = (rng.standard_normal(H) * 0.1).astype(f32), rng.standard_normal(H).astype(f32)
        src, dst = np.sort(rng.integers(0, n, pairs)), rng.integers(0, n, pairs)
        label = (rng.random(pairs) < 0.5).astype(f32)

        def train_args():
            return (pu, pv, b1, w2, f32(0.1), src, dst, label, np.zeros(pairs, f32), np.zeros_like(pu),
                    np.zeros_like(pv), np.zeros(H), True)

        def forward_args():
            return (pu, pv, b1, w2, f32(0.1), src, dst, np.zeros(pairs, f32))

        for kernel, fresh, outs in (("edge_bce_train", train_args, (8, 9, 10, 11)),
                                    ("edge_mlp_forward", forward_args, (7,))):
            if not (hasattr(before, kernel) and hasattr(now, kernel)):  # deleted since (perf/results/kernels)
                continue
            res = timed({"before": getattr(before, kernel), "now": getattr(now, kernel)}, fresh)
            diff = max(_relative_difference(res["before"][1][i], res["now"][1][i]) for i in outs)
            print(f"{kernel:17s} N={n:<6d} {pairs:>9d} pairs: before {res['before'][0] / pairs * 1e9:6.2f}, "
                  f"now {res['now'][0] / pairs * 1e9:6.2f} ns a pair; outputs differ by {diff:.1e} of their largest "
                  f"({repeat} x {res['now'][2]} calls)")
    for B in (2, 16):
        T, H = 64, 16
        gates = (rng.standard_normal((T, 4 * H, B)) * 2).astype(f32)
        w_hh = (rng.standard_normal((4 * H, H)) * 0.3).astype(f32)

        def lstm_args():
            states = [np.zeros((T + 1, H, B), f32) for _ in range(2)] + [np.zeros((T, H, B), f32) for _ in range(3)]
            return (gates.copy(), w_hh, *states, np.ones((0, 1, B), f32), True)

        res = timed({"before": before.lstm_forward, "now": now.lstm_forward}, lstm_args)
        diff = max(_relative_difference(res["before"][1][i], res["now"][1][i]) for i in (0, 2, 3, 6))
        print(f"lstm_forward      T={T} H={H} B={B:<3d}: before {res['before'][0] * 1e6:7.1f}, now "
              f"{res['now'][0] * 1e6:7.1f} us a call; outputs differ by {diff:.1e} of their largest "
              f"({repeat} x {res['now'][2]} calls)")


# --- the 1.3x rule (issue 57 item 3) ---------------------------------------------------------------------------

#: an accelerated path stays where it makes a whole epoch at least this much faster than the plain-torch one
RULE = 1.3

#: the kernel groups a link-prediction epoch on the CPU runs (the sparse product and the decoder's)
DECODER_KERNELS = ("csr_mm", "draw_negatives", "edge_bce_train", "edge_mlp_forward", "project", "score_stats")

#: hpcdgnn/tasks/link_prediction.py's calls of ``kernels.available`` (no kernel named) by the qualified name of
#: the function that makes them: the kernel each decides on
DECODER_SITES = {"_EdgeMLP.forward": "edge_mlp_forward", "EdgeDecoder.train_loss": "edge_bce_train",
                 "LinkPrediction._sums": "score_stats"}

#: prepared datasets: name -> (raw file, its events kept (None: all), ``hpcdgnn prepare`` arguments; {K} = events
#: per snapshot for T slices of equal event count, T the value of "slices")
DATASETS = {
    "email64": ("email-Eu-core-temporal.txt.gz", None, {"slices": 64}),
    "email256": ("email-Eu-core-temporal.txt.gz", None, {"slices": 256}),
    "email1k": ("email-Eu-core-temporal.txt.gz", None, {"slices": 1024}),
    "college15k": ("CollegeMsg.txt.gz", 15000, {"events": True}),
}


def _lp_model(name: str) -> dict:
    return {"name": name, "hidden": 16, "layers": 2}


class Job(NamedTuple):
    """One benchmark job: its data, the job's sections, the kernel groups its epochs run (each switched off in a
    variant of its own), and which hand-written recurrence a ``bptt=torch`` variant replaces (None: none).

    Not a dataclass: the tests load this script by path, outside ``sys.modules``, where a dataclass needs it.
    """

    name: str
    data: str
    model: dict
    task: dict
    strategy: dict
    kernels: tuple[str, ...]
    bptt: str | None = None
    train: dict | None = None


_LP = {"name": "link_prediction"}
_CHUNK = {"name": "chunk", "chunk_size": 512, "sequences": "active"}
JOBS = [
    Job("cdgcn-snapshot", "email256", _lp_model("cdgcn"), _LP, {"name": "snapshot"}, DECODER_KERNELS),
    Job("tmgcn-snapshot", "email1k", _lp_model("tmgcn"), _LP, {"name": "snapshot"}, DECODER_KERNELS),
    Job("evolvegcn_o-snapshot", "email1k", _lp_model("evolvegcn_o"), _LP, {"name": "snapshot"},
        (*DECODER_KERNELS, "lstm_forward"), bptt="evolvegcn_o"),
    Job("cdgcn-blocks4", "email256", _lp_model("cdgcn"), _LP, {"name": "snapshot", "blocks": 4},
        (*DECODER_KERNELS, "csr_mm_t", "gcn_norm_degrees", "graph_diff_merge")),
    Job("cdgcn-chunk-fused", "email256", _lp_model("cdgcn"), _LP, {**_CHUNK, "fusion": "on", "fusion_memory_mb": 0.5},
        (*DECODER_KERNELS, "add_rows", "put_rows")),
    Job("cdgcn-chunk-padded", "email64", _lp_model("cdgcn"), _LP, {**_CHUNK, "fusion": "off"},
        ("add_rows", "put_rows"), bptt="lanes"),
    Job("cdgcn-regression", "email256", _lp_model("cdgcn"), {"name": "regression"}, {"name": "snapshot"}, ("csr_mm",)),
    Job("tgcn_cell-sequences", "email64", _lp_model("tgcn_cell"), _LP, {"name": "sequences", "window": 4}, ()),
    Job("tgn-memory", "college15k", {"name": "tgn", "memory_dim": 32, "time_dim": 32, "hidden": 32, "neighbors": 10,
                                     "heads": 2, "static_memory": "off"},
        {"name": "temporal_link_prediction", "batch_events": 600, "negatives": 1, "eval_negatives": 9},
        {"name": "memory"}, (), train={"lr": 0.0001}),
]


def _variants(job: Job) -> list[dict]:
    """all, torch, all but each kernel group (of those the measured tree still has), and bptt=torch where the job
    has a hand-written recurrence."""
    from hpcdgnn.ops import kernels

    out = [{"name": "all", "skip": []}, {"name": "torch", "skip": list(kernels.KERNELS)}]
    out += [{"name": f"-{k}", "skip": [k]} for k in job.kernels if k in kernels.KERNELS]
    if job.bptt:
        out.append({"name": "bptt=torch", "skip": [], "bptt": "torch"})
    return out


def _name_decoder_calls(kernels, unnamed: set) -> None:
    """``kernels.available`` called without a kernel name gets the one its call site decides on
    (:data:`DECODER_SITES`), so the switch can skip the decoder's kernels one at a time; a site not listed keeps
    none (the three together) and is recorded in ``unnamed``."""
    real = kernels.available
    if "kernel" not in inspect.signature(real).parameters:
        sys.exit("perf/bench_kernels.py --rule: this tree's hpcdgnn.ops.kernels has no per-kernel switch")

    def available(*tensors, kernel=None, **kw):
        if kernel is None:
            site = sys._getframe(1).f_code.co_qualname
            kernel = DECODER_SITES.get(site)
            if kernel not in kernels.KERNELS:  # a site not listed, or a kernel this tree no longer has
                kernel = None
                unnamed.add(site)
        return real(*tensors, kernel=kernel, **kw)

    kernels.available = available


def _patch_bptt(current: dict) -> None:
    """``bptt=torch``: torch's LSTM where the hand-written BPTT of hpcdgnn/ops/scan.py runs — EvolveGCN-O's
    weight recurrence as ``nn.LSTMCell`` step by step (its form before the scan), and the chunk strategy's
    lanes through the layer's own ``nn.LSTM`` (padded lanes only, ``fusion: off``: there every sequence starts
    at step 0, so the reset mask changes nothing torch's module does not do)."""
    import torch

    from hpcdgnn.nn.models import base, evolvegcn

    fed = evolvegcn.self_fed_lstm

    def self_fed_lstm(cell, w, c, steps):
        if current.get("bptt") != "torch":
            return fed(cell, w, c, steps)
        ws = []
        for _ in range(steps):
            w, c = cell(w, (w, c))
            ws.append(w)
        return torch.stack(ws), (w, c)

    evolvegcn.self_fed_lstm = self_fed_lstm
    packed = base.DynamicLayer.packed_temporal

    def packed_temporal(self, x, mask):
        if current.get("bptt") != "torch" or x.shape[0] == 0 or x.shape[1] == 0:
            return packed(self, x, mask)
        if not bool(mask[1:].all()):
            raise RuntimeError("bptt=torch: lanes reset after their first step (chunk fusion: on); torch's LSTM "
                               "stands in for padded lanes only (fusion: off)")
        return self.rnn()(x)[0]

    base.DynamicLayer.packed_temporal = packed_temporal


def _reexec() -> None:
    """``run``'s allocator restart (hpcdgnn/allocator.py's ``reexec``) where the tree has one."""
    try:
        from hpcdgnn.allocator import reexec
    except ImportError:  # a tree that leaves the allocator to the job script's LD_PRELOAD
        return
    reexec()


#: jemalloc's configuration of hpcdgnn/allocator.py's re-exec: keep freed pages, no extra thread
_JEMALLOC_CONF = "background_thread:false,dirty_decay_ms:-1,muzzy_decay_ms:-1"


def find_jemalloc() -> str | None:
    """libjemalloc.so.2 in the usual library directories, or None."""
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"):
        if (Path(d) / "libjemalloc.so.2").is_file():
            return str(Path(d) / "libjemalloc.so.2")
    return None


def _variant_of(epoch: int, V: int) -> int:
    """The variant epoch ``epoch`` (from 1) runs: rounds of V epochs, in order and then in reverse (ABBA...), so a
    variant meets early and late epochs, odd and even ones alike (a job whose epochs alternate in cost, or a
    machine slowing down over the run, would otherwise favour some variants)."""
    r, i = divmod(epoch - 1, V)
    return i if r % 2 == 0 else V - 1 - i


def rule_worker(spec_path: str, argv: list[str]) -> int:
    """Under mpirun: ``hpcdgnn run`` with each epoch run as a variant of the spec (:func:`_variant_of`); rank 0
    writes each epoch's variant, its own seconds and the kernels it called to the spec's ``out``."""
    _reexec()  # run's allocator restart, before torch loads
    spec = json.loads(Path(spec_path).read_text())
    variants = spec["variants"]
    import hpcdgnn.train.trainer as trainer
    from hpcdgnn.__main__ import main
    from hpcdgnn.ops import kernels

    unnamed: set[str] = set()
    current: dict = {}
    _name_decoder_calls(kernels, unnamed)
    _patch_bptt(current)
    records = []
    train_epoch = trainer.train_epoch

    def cycling(run, task, epoch, meter, stop=None):
        v = variants[_variant_of(epoch, len(variants))]
        os.environ["HPCDGNN_KERNELS_SKIP"] = ",".join(v["skip"])
        current["bptt"] = v.get("bptt")
        before = kernels.calls()
        t0 = time.perf_counter()
        out = train_epoch(run, task, epoch, meter, stop)
        seconds = time.perf_counter() - t0
        calls = {k: n - before.get(k, 0) for k, n in kernels.calls().items() if n != before.get(k, 0)}
        records.append({"epoch": epoch, "variant": v["name"], "seconds": seconds, "calls": calls})
        return out

    trainer.train_epoch = cycling
    sys.argv = ["hpcdgnn", *argv]
    try:
        rc = main()
    except SystemExit as stop:
        rc = stop.code
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    if rank == 0:
        Path(spec["out"]).write_text(json.dumps({"epochs": records, "unnamed_sites": sorted(unnamed)}))
    return int(rc or 0)


def _count_events(path: Path) -> int:
    with gzip.open(path, "rt") as f:
        return sum(1 for line in f if line.strip() and line.lstrip()[0] not in "#%")


def _raw(name: str, data: Path) -> Path:
    for d in (data, REPO / "inputs"):
        if (d / name).is_file():
            return d / name
    sys.exit(f"perf/bench_kernels.py --rule: {name} is in neither {data} nor {REPO / 'inputs'}")


def prepare_data(name: str, data: Path, work: Path, tree: Path | None) -> Path:
    """Dataset ``name`` of :data:`DATASETS` prepared under ``work`` (once)."""
    out = work / name
    if out.exists():
        return out
    raw, keep, how = DATASETS[name]
    src = _raw(raw, data)
    if keep is not None:  # the first events of the file, as it is ordered (time order for CollegeMsg)
        cut = work / f"{name}.txt.gz"
        with gzip.open(src, "rt") as f, gzip.open(cut, "wt") as g:
            for i, line in enumerate(f):
                if i >= keep:
                    break
                g.write(line)
        src = cut
    if how.get("events"):
        args = ["--kind", "events"]
    else:
        per = math.ceil(_count_events(src) / how["slices"])
        args = ["--events-per-snapshot", str(per), "--labels", "next_activity", "--targets", "next_log_degree"]
    env = dict(os.environ, **({"PYTHONPATH": str(tree)} if tree else {}))
    subprocess.run([sys.executable, "-m", "hpcdgnn", "prepare", str(src), "--format", "snap", *args, "--output",
                    str(out)], check=True, stdout=subprocess.DEVNULL, cwd=tree or REPO, env=env)
    return out


def _job_dict(job: Job, path: Path, epochs: int, **strategy) -> dict:
    return {"data": {"path": str(path), "validate": "structure"}, "model": dict(job.model), "task": dict(job.task),
            "train": {"epochs": epochs, "threads": 1, "dtype": "float32", "warmup_epochs": 1, "seed": 0,
                      **(job.train or {})},
            "strategy": {**job.strategy, **strategy}, "checkpoint": {"every": 0, "every_minutes": 1e6}}


#: environment of every run here: the default kernels, no skip list, one thread for every library
_ENV = {"HPCDGNN_KERNELS": "numba", "HPCDGNN_KERNELS_SKIP": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def cycle_job(job: Job, path: Path, work: Path, tree: Path | None, repeat: int) -> dict:
    """One run of ``job`` cycling its variants by epoch; per variant the timed epochs and the calls per epoch."""
    from bench_epoch import run_job

    variants = _variants(job)
    V = len(variants)
    spec = work / f"{job.name}.spec.json"
    out = work / f"{job.name}.epochs.json"
    spec.write_text(json.dumps({"variants": variants, "out": str(out)}))
    t0 = time.perf_counter()
    recs = run_job(_job_dict(job, path, V * (1 + repeat)), 1, work, f"cycle-{job.name}", tree, env=_ENV,
                   program=[str(Path(__file__).resolve()), "--rule-worker", str(spec)])
    wall = time.perf_counter() - t0
    got = json.loads(out.read_text())
    epoch_s = {r["epoch"]: r["time"]["epoch"]["max"] for r in recs}
    res = {v["name"]: {"times": [], "calls": {}} for v in variants}
    for e in got["epochs"]:
        if e["epoch"] > V:  # the first round compiles and warms up every variant
            res[e["variant"]]["times"].append(epoch_s[e["epoch"]])
            res[e["variant"]]["calls"] = e["calls"]
    return {"variants": res, "unnamed": got["unnamed_sites"], "wall": wall, "epochs": V * (1 + repeat)}


def ab_runs(name: str, P: int, pairs: list[tuple[str, dict, dict]], work: Path, tree: Path | None,
            repeat: int) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """Each (label, job, environment) of ``pairs`` a run of its own on P ranks, ABAB... ``repeat`` times; per label
    every steady epoch (slowest rank), and the first run's summary.json (what ran: its allocator, progress
    threads, compiled kernels)."""
    from bench_epoch import run_job

    times: dict[str, list[float]] = {label: [] for label, _, _ in pairs}
    summary: dict[str, dict] = {}
    for rep in range(repeat):
        for label, jobdict, env in pairs if rep % 2 == 0 else pairs[::-1]:
            tag = f"{name}-{label}-p{P}-{rep}"
            recs = run_job(jobdict, P, work, tag, tree, env={**_ENV, **env})
            times[label] += [r["time"]["epoch"]["max"] for r in recs if not r["warmup"]]
            summary.setdefault(label, json.loads((work / f"run-{tag}" / "summary.json").read_text()))
    return times, summary


def _pair_line(t: dict[str, list[float]], a: str, b: str) -> str:
    """``a`` and ``b``'s medians, b / a, and every epoch of each."""
    ma, mb = _median(t[a]), _median(t[b])
    return (f"{a} {ma:.3f} s, {b} {mb:.3f} s: {b} / {a} {mb / ma:.3f}  (epochs: {a} "
            f"{' '.join(f'{x:.3f}' for x in t[a])}; {b} {' '.join(f'{x:.3f}' for x in t[b])})")


def _has_progress() -> bool:
    """Whether the measured tree's jobs have ``comm.progress`` (the progress thread's switch)."""
    import dataclasses

    from hpcdgnn.config.schema import CommConfig

    return "progress" in {f.name for f in dataclasses.fields(CommConfig)}


def _machine() -> list[str]:
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    keep = ("Architecture", "Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "L2 cache", "L3 cache")
    lines = [ln for ln in cpu if ln.split(":")[0].strip() in keep]
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return lines + [f"uptime: {up}"]


def rule(args) -> None:
    """Prepare the data, cycle every job's variants, run the checks, print the tables."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    tree = Path(args.tree).resolve() if args.tree else None
    if tree is not None:
        sys.path.insert(0, str(tree))  # the variants' names from the measured tree's hpcdgnn.ops.kernels
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    jobs = [j for j in JOBS if args.jobs is None or j.name in args.jobs]
    print(f"perf/bench_kernels.py --rule: hpcdgnn from {tree or REPO} (this checkout at {commit}), {args.repeat} "
          f"timed rounds, 1 rank x 1 thread unless said; jemalloc: {find_jemalloc()}")
    for ln in _machine():
        print(f"  {ln}")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-rule-") as tmp:
        work = Path(args.work).resolve() if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = Path(args.data).resolve()
        paths = {}
        for j in jobs:
            paths[j.name] = prepare_data(j.data, data, work, tree)
        marginal: dict[str, list[tuple[str, float]]] = {}
        if jobs:
            print(f"\n{'job':22s} {'variant':20s} {'median s':>9s} {'min':>7s} {'max':>7s} {'/ all':>7s}  "
                  "kernels called per epoch")
        for j in jobs:
            got = cycle_job(j, paths[j.name], work, tree, args.repeat)
            res = got["variants"]
            base = _median(res["all"]["times"])
            for v, r in res.items():
                m = _median(r["times"])
                calls = " ".join(f"{k}:{n}" for k, n in sorted(r["calls"].items())) or "-"
                print(f"{j.name:22s} {v:20s} {m:9.3f} {min(r['times']):7.3f} {max(r['times']):7.3f} "
                      f"{m / base:7.3f}  {calls}", flush=True)
                if v.startswith("-"):
                    ran = res["all"]["calls"].get(v[1:], 0)
                    marginal.setdefault(v[1:], []).append((j.name, m / base, ran))
            if got["unnamed"]:
                print(f"{'':22s} (kernels.available asked without a kernel name from {', '.join(got['unnamed'])})")
            print(f"{'':22s} ({got['epochs']} epochs in {got['wall']:.0f} s)")
        if marginal:
            print(f"\nper kernel: epoch without it / epoch with it (the marginal speed-up of a whole epoch), rule >= "
                  f"{RULE}")
        from hpcdgnn.ops import kernels

        for k, rows in sorted(marginal.items()):
            group = next(("+".join(g) for g in kernels.SIBLINGS if k in g), k)
            called = [(n, r) for n, r, ran in rows if ran]
            best = max((r for _, r in called), default=float("nan"))
            verdict = "keep" if best >= RULE else "delete"
            cells = ", ".join(f"{n} {r:.3f}" + ("" if ran else " (not called)") for n, r, ran in rows)
            print(f"  {group:30s} {verdict:7s} best {best:.3f}: {cells}")
        jobs_by_name = {j.name: j for j in JOBS}
        if "torch" in args.checks:
            print("\nHPCDGNN_KERNELS=numba against =torch, processes of their own (steady epochs, median)")
            for name in args.torch_jobs:
                j = jobs_by_name[name]
                jd = _job_dict(j, paths.get(name) or prepare_data(j.data, data, work, tree), args.epochs)
                t, summ = ab_runs(f"env-{name}", 1, [("numba", jd, {}), ("torch", jd, {"HPCDGNN_KERNELS": "torch"})],
                                  work, tree, args.repeat)
                ran = "; ".join(f"{k}: {sum(summ[k]['compiled_kernels'].values())} compiled calls" for k in summ)
                print(f"  {name:22s} {_pair_line(t, 'numba', 'torch')}  [{ran}]", flush=True)
        j = jobs_by_name[args.system_job]
        if "progress" in args.checks and not _has_progress():
            print("\ncomm.progress: the measured tree has no progress thread (no such key); check skipped")
        elif "progress" in args.checks:
            print(f"\ncomm.progress calls against thread, {j.name}, P = 2, overlap_chunks 4, grad_buckets 4 "
                  "(processes of their own)")
            jd = _job_dict(j, paths.get(j.name) or prepare_data(j.data, data, work, tree), args.epochs,
                           overlap_chunks=4)
            t, summ = ab_runs(f"progress-{j.name}", 2, [(m, {**jd, "comm": {"grad_buckets": 4, "progress": m}}, {})
                                                         for m in ("calls", "thread")], work, tree, args.repeat)
            ran = "; ".join(f"{k}: progress threads on {summ[k]['environment'].get('progress_thread_ranks')} ranks, "
                            f"{summ[k]['environment'].get('progress_thread_dedicated_ranks')} with a core of their own"
                            for k in summ)
            print(f"  P=2: {_pair_line(t, 'thread', 'calls')}  [{ran}]", flush=True)
        if "allocator" in args.checks:
            lib = find_jemalloc()
            if lib is None:
                sys.exit("perf/bench_kernels.py --rule --checks allocator: no libjemalloc.so.2 found")
            print(f"\njemalloc ({lib} preloaded) against glibc, {j.name} (processes of their own)")
            jd = _job_dict(j, paths.get(j.name) or prepare_data(j.data, data, work, tree), args.epochs)
            preload = {"HPCDGNN_MALLOC": "auto", "LD_PRELOAD": lib, "MALLOC_CONF": _JEMALLOC_CONF}
            system = {"HPCDGNN_MALLOC": "system", "LD_PRELOAD": ""}
            for P in args.ranks:
                t, summ = ab_runs(f"malloc-{j.name}", P, [("jemalloc", jd, preload), ("glibc", jd, system)], work, tree,
                                  args.repeat)
                ran = "; ".join(f"{k}: {summ[k]['environment'].get('host_allocator')}" for k in summ)
                print(f"  P={P}: {_pair_line(t, 'jemalloc', 'glibc')}  [{ran}]", flush=True)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    for ln in _machine()[-1:]:
        print(f"  {ln}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--rule-worker":
        sys.exit(rule_worker(sys.argv[2], sys.argv[3:]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="git revision whose compiled kernels are the baseline (--job, --micro)")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--job", help="a one-rank hpcdgnn job to train, alternating the kernels by epoch")
    what.add_argument("--micro", action="store_true", help="the kernels alone on random arrays")
    what.add_argument("--rule", action="store_true", help="each kernel's share of whole epochs against torch's path")
    ap.add_argument("--epochs", type=int, default=None,
                    help="--job: epochs (default 120); --rule: epochs of each --checks run (default 4, first warm-up)")
    ap.add_argument("--repeat", type=int, default=None,
                    help=f"--micro: timed samples per kernel and module, each the median of the calls that fill "
                         f"{SAMPLE_S * 1e3:g} ms (default 12); --rule: timed rounds of the variants, and runs of each "
                         "--checks pair (default 3)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="job overrides, as for run")
    ap.add_argument("--jobs", nargs="*", choices=[j.name for j in JOBS],
                    help="--rule: cycle these jobs only (none: the --checks alone)")
    ap.add_argument("--checks", nargs="*", default=["torch", "progress", "allocator"],
                    choices=["torch", "progress", "allocator"], help="--rule: the runs in processes of their own")
    ap.add_argument("--torch-jobs", nargs="+", default=["cdgcn-snapshot", "evolvegcn_o-snapshot"],
                    choices=[j.name for j in JOBS], help="--rule: jobs of the torch check")
    ap.add_argument("--system-job", default="cdgcn-snapshot", choices=[j.name for j in JOBS],
                    help="--rule: the job of the progress and allocator checks")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="--rule: P of the allocator check")
    ap.add_argument("--tree", help="--rule: the hpcdgnn tree to run (PYTHONPATH; default: this checkout)")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"), help="--rule: the raw datasets")
    ap.add_argument("--work", help="--rule: keep the prepared data and runs here (default: a temporary directory)")
    args = ap.parse_args()
    if args.rule:
        args.epochs = 4 if args.epochs is None else args.epochs
        args.repeat = 3 if args.repeat is None else args.repeat
        rule(args)
        return
    if not args.before:
        ap.error("--job and --micro need --before REV")
    args.epochs = 120 if args.epochs is None else args.epochs
    args.repeat = 12 if args.repeat is None else args.repeat
    if args.job:  # the allocator restart of `run` (hpcdgnn/allocator.py) happens here, before the temporary module
        _reexec()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-kernels-") as tmp:
        before = load_before(args.before, Path(tmp))
        if args.micro:
            micro(before, args.repeat)
        else:
            epochs_ab(before, args.job, args.epochs, args.set)


if __name__ == "__main__":
    main()
