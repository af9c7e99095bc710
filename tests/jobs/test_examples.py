"""jobs/examples/: one example job per technique (issue 57 item 7), each run for one epoch on tiny data.

Every example names in its header the command that prepares its data (``python -m hpcdgnn prepare ...
--output inputs/<name>``) and the command that runs it (``hpcdgnn-mpirun -np P python -m hpcdgnn run
jobs/examples/<file>``). The test runs both: the prepare command as written, on the first events of the
bundled CollegeMsg and with fewer snapshots, then the job under ``mpirun -np P`` with its data path moved
there and the sizes overridden (``--set``), and checks that the epoch ran with a finite loss and left the
trace of its technique in metrics.jsonl / summary.json. Together the examples cover every model and task
name of the schema.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shlex
import typing
from pathlib import Path

import pytest
import yaml

from hpcdgnn.__main__ import main
from hpcdgnn.config import load_job
from hpcdgnn.config.schema import ModelConfig, TaskConfig
from tests.conftest import REPO, read_metrics

EXAMPLES_DIR = REPO / "jobs" / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))

#: the files the README links, one per technique (SPEC S1-S6, D1-D3, R1-R4, H1-H5, M1-M2)
EXPECTED = {
    "s1-pss-ts.yaml", "s2-checkpoint-blocks.yaml", "s3-graph-difference.yaml", "s4-precompute.yaml",
    "s5-smoothing.yaml", "s6-vertex-halo.yaml", "s6-pss.yaml", "d1-graph-chunks.yaml", "d2-chunk-fusion.yaml",
    "d3-stale-aggregation.yaml", "r1-placement.yaml", "r2-incremental.yaml", "r3-reuse.yaml",
    "r4-seq-first-sampling.yaml", "h1-h2-hybrid-batches.yaml", "h3-h5-dynahb.yaml",
    "m1-tgn.yaml", "m2-memory-parallelism.yaml", "p1-planner-auto.yaml", "g1-grid.yaml",
}

#: CollegeMsg events the tiny datasets are prepared from (237 vertices), and their snapshots
TINY_EVENTS, TINY_SNAPSHOTS = 1000, 10

#: what each example's technique leaves in its first metrics.jsonl record: a path of keys that must exist
EVIDENCE = {
    "s1-pss-ts": ("bytes_by_tag", "redistribute.fwd"),
    "s3-graph-difference": ("transfer_bytes",),
    "s5-smoothing": ("bytes_by_tag", "time_halo.fwd"),
    "s6-vertex-halo": ("bytes_by_tag", "halo.fwd"),
    "g1-grid": ("bytes_by_tag", "halo.fwd"),
    "s6-pss": ("bytes_by_tag", "pipeline.fwd"),
    "d1-graph-chunks": ("fusion", "chunks"),
    "d2-chunk-fusion": ("fusion", "time_slots_padded"),
    "d3-stale-aggregation": ("stale", "rows_sent"),
    "r2-incremental": ("incremental", "rows_recomputed"),
    "r3-reuse": ("reuse", "encoder_to_decoder_hits"),
    "r4-seq-first-sampling": ("bytes_by_tag", "batch"),
    "h1-h2-hybrid-batches": ("hybrid", "replication"),
    "h3-h5-dynahb": ("hybrid", "reservoir", "reuse_rate"),
    "m1-tgn": ("memory",),
    "m2-memory-parallelism": ("memory",),
}


def _schema_names(cls, section: str) -> set[str]:
    """The names the schema accepts for ``<section>.name``: the values of ``cls.name``'s Literal type, or, where
    the name is a plain ``str`` checked against a registry (models, since the regimes own them), the registry's."""
    literal = typing.get_args(typing.get_type_hints(cls)["name"])
    if literal:
        return set(literal)
    from hpcdgnn.regimes import names

    return set(names(section))


def _header(path: Path) -> list[str]:
    """The leading comment block, '#' stripped, backslash-continued lines joined."""
    lines: list[str] = []
    for raw in path.read_text().splitlines():
        if not raw.startswith("#"):
            break
        text = raw[1:].strip()
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1].rstrip() + " " + text
        else:
            lines.append(text)
    return lines


def _run_ranks(path: Path) -> int:
    """P of the header's ``hpcdgnn-mpirun -np P python -m hpcdgnn run jobs/examples/<this file>``."""
    runs = [m for ln in _header(path)
            if (m := re.fullmatch(rf"hpcdgnn-mpirun -np (\d+) python -m hpcdgnn run jobs/examples/{path.name}", ln))]
    assert len(runs) == 1, f"{path.name}: the header should give the command that runs it, once"
    return int(runs[0].group(1))


def _prepare_args(path: Path, data_path: str) -> list[str]:
    """The header's ``python -m hpcdgnn prepare ... --output <data.path>`` as an argument list."""
    for ln in _header(path):
        if ln.startswith("python -m hpcdgnn prepare ") and ln.endswith(f"--output {data_path}"):
            return shlex.split(ln)[3:]
    raise AssertionError(f"{path.name}: the header should give the prepare command of {data_path}")


@pytest.fixture(scope="module")
def tiny_input(tmp_path_factory) -> Path:
    """The first events of the bundled CollegeMsg (SNAP format), as plain text."""
    with gzip.open(REPO / "inputs" / "CollegeMsg.txt.gz", "rt") as f:
        head = [next(f) for _ in range(TINY_EVENTS)]
    out = tmp_path_factory.mktemp("examples") / "CollegeMsg-head.txt"
    out.write_text("".join(head))
    return out


@pytest.fixture(scope="module")
def tiny_data(tiny_input, tmp_path_factory):
    """``tiny_data(args)``: the dataset the header's prepare ``args`` make from :func:`tiny_input`, with
    ``--snapshots T`` made :data:`TINY_SNAPSHOTS` windows of equal event counts; built once per distinct command."""
    root = tmp_path_factory.mktemp("examples-data")
    built: dict[tuple[str, ...], Path] = {}

    def make(args: list[str]) -> Path:
        key = tuple(args)
        if key not in built:
            argv = list(args)
            assert argv[0] == "prepare" and argv[1] == "inputs/CollegeMsg.txt.gz", argv
            argv[1] = str(tiny_input)
            out = root / f"d{len(built)}"
            argv[argv.index("--output") + 1] = str(out)
            if "--snapshots" in argv:  # equal event counts: the first events' time slices would leave some empty
                i = argv.index("--snapshots")
                argv[i : i + 2] = ["--events-per-snapshot", str(TINY_EVENTS // TINY_SNAPSHOTS)]
            assert main(argv) == 0, argv
            built[key] = out
        return built[key]

    return make


def _sizes(job) -> list[str]:
    """``--set`` overrides that make the example tiny (small widths and batches), valid for its strategy."""
    over = ["train.epochs=1", "train.threads=1", "checkpoint.every_minutes=0"]
    if job.model.name == "tgn":
        over += ["model.memory_dim=8", "model.time_dim=8", "model.hidden=8", "model.neighbors=4",
                 "task.batch_events=100", "task.eval_negatives=9"]
    else:
        over += ["model.hidden=4"]
        if job.task.name == "link_prediction":
            over += ["task.decoder_hidden=4"]
    if job.strategy.name == "sequences":
        over += ["strategy.batch_vertices=64"]
        if not job.strategy.fanouts or job.strategy.fanouts[-1] == 0:  # a sampled input layer has no cache
            over += ["strategy.cache_mb=4"]
    if job.strategy.name == "chunk":
        over += ["strategy.chunk_size=128"]
    return over


def test_examples_are_there_and_cover_every_model_and_task():
    """The 20 files, each a valid job with a header (what, paper section, data, commands), together using
    every model and every task the schema names."""
    assert {p.name for p in EXAMPLES} == EXPECTED
    jobs = {p.name: load_job(p, check_paths=False) for p in EXAMPLES}
    models, tasks = {j.model.name for j in jobs.values()}, {j.task.name for j in jobs.values()}
    assert models == _schema_names(ModelConfig, "model"), "every model in at least one example"
    assert tasks == _schema_names(TaskConfig, "task"), "every task in at least one example"
    readme = (EXAMPLES_DIR / "README.md").read_text()
    for p in EXAMPLES:
        assert 1 <= _run_ranks(p) <= 3
        _prepare_args(p, jobs[p.name].data.path)
        assert re.search(r"§\d", " ".join(_header(p))), f"{p.name}: the header should name the paper section"
        assert p.name in readme, f"{p.name} missing from jobs/examples/README.md"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_one_epoch(example, launcher, tiny_data, tmp_path):
    """The example under its header's rank count, on tiny data: exit 0, one epoch with a finite loss, and
    its technique's record in metrics.jsonl."""
    job = load_job(example, check_paths=False)
    data = tiny_data(_prepare_args(example, job.data.path))
    run_dir = tmp_path / "run"
    out = launcher.run(_run_ranks(example), ["-m", "hpcdgnn", "run", str(example), "--output", str(run_dir),
                                             "--set", f"data.path={data}", *_sizes(job)], timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["final"]["epoch"] == 1
    records = read_metrics(run_dir)
    assert [r["epoch"] for r in records] == [1]
    assert math.isfinite(records[0]["loss"]) and records[0]["loss"] > 0
    node = records[0]
    for key in EVIDENCE.get(example.stem, ()):
        assert key in node, f"{example.stem}: no {key!r} in {sorted(node)}"
        node = node[key]
    _check_technique(example.stem, records[0], summary, run_dir, out.stdout)
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    planner = json.loads((run_dir / "plan.json").read_text()).get("planner")
    trained = job.strategy.name if planner is None else planner["picked"]  # auto: the strategy it picked
    assert resolved["strategy"]["name"] == trained and resolved["model"]["name"] == job.model.name


def _check_technique(stem: str, record: dict, summary: dict, run_dir: Path, stdout: str) -> None:
    """What the example's header promises beyond :data:`EVIDENCE`'s keys."""
    if stem == "s2-checkpoint-blocks":  # nb = 3 blocks of the timeline
        assert len(json.loads((run_dir / "plan.json").read_text())["block_bounds"]) == 3 + 1
    elif stem == "s3-graph-difference":  # blocks reloaded every epoch, as differences
        assert summary["transfer"]["mode"] == "graph_difference" and summary["transfer"]["epoch_bytes"] > 0
    elif stem == "s4-precompute":  # no switch: on because tgcn_cell's first layer is a plain GCN
        assert "precompute Ã·X" in stdout, stdout
    elif stem == "h3-h5-dynahb":  # ranks averaged in rounds, ending the epoch with one model; no gradient sums
        assert record["hybrid"]["rounds"] >= 1 and record["hybrid"]["replicas_equal"], record["hybrid"]
        assert "grad_allreduce" not in record["bytes_by_tag"] and "epsilon" in record["hybrid"]
    elif stem == "p1-planner-auto":  # a candidate picked, every candidate predicted, the pick in the first lines
        planner = json.loads((run_dir / "plan.json").read_text())["planner"]
        assert planner["picked"] in ("snapshot", "pss", "vertex", "chunk")
        assert {p["strategy"] for p in planner["predictions"]} == {"snapshot", "pss", "vertex", "chunk"}
        assert f"strategy: auto picked {planner['picked']}" in stdout, stdout
    elif stem in ("r1-placement", "h1-h2-hybrid-batches"):  # data read once: only gradients and counts move
        assert set(record["bytes_by_tag"]) <= {"grad_allreduce", "batch"}, record["bytes_by_tag"]
