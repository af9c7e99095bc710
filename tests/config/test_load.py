"""Strict config loading: unknown keys, wrong types and bad values are one-line errors naming file and key."""

from __future__ import annotations

import time

import pytest
import torch

from hpcdgnn.config import job_to_dict, load_job
from hpcdgnn.config.load import override_of
from hpcdgnn.errors import ConfigError
from hpcdgnn.optim import Adam
from tests.conftest import write_job


def _job(tmp_path, small_dataset, text: str):
    p = tmp_path / "job.yaml"
    p.write_text(f"data: {{path: {small_dataset}}}\n" + text)
    return p


def test_defaults_and_overrides(tmp_path, small_dataset):
    p = _job(tmp_path, small_dataset, "train: {epochs: 4}\n")
    job = load_job(p, ["train.lr=0.5", "model.name=tmgcn", "task.split=[0.5, 0.25, 0.25]"])
    assert job.train.epochs == 4 and job.train.lr == 0.5 and job.model.name == "tmgcn"
    assert job.task.split == (0.5, 0.25, 0.25)
    d = job_to_dict(job)
    assert d["train"]["epochs"] == 4 and d["strategy"]["name"] == "snapshot" and d["task"]["split"] == [0.5, 0.25, 0.25]
    # blanks around '=' (a script's "train.epochs = 2"): the key is train.epochs, and a mistyped one is the --set's
    assert load_job(p, ["train.epochs = 2", " train.lr =0.25"]).train.epochs == 2
    with pytest.raises(ConfigError, match=r"^--set train\.epoch: unknown key; did you mean 'epochs'\?$"):
        load_job(p, ["train.epoch = 2"])


@pytest.mark.parametrize(
    ("text", "overrides", "needles"),
    [
        ("train: {epochz: 3}\n", [], ["train.epochz", "unknown key", "did you mean 'epochs'"]),
        ("trian: {epochs: 3}\n", [], ["trian", "did you mean 'train'"]),
        ("train: {epochs: '3'}\n", [], ["train.epochs", "expected an integer"]),
        ("train: {epochs: 2.5}\n", [], ["train.epochs", "expected an integer"]),
        ("train: {dtype: float16}\n", [], ["train.dtype", "float32, float64"]),
        ("model: {name: gcn}\n", [], ["model.name", "cdgcn"]),
        ("train: {epochs: 0}\n", [], ["train.epochs", ">= 1"]),
        ("", ["train.seed=-1"], ["train.seed", ">= 0"]),
        ("strategy: {name: chunk, chunk_size: big}\n", [],
         ["strategy.chunk_size", "expected an integer or auto, got str 'big'"]),
        ("strategy: {name: pss-ts2}\n", [], ["strategy.name", "choose from", "snapshot"]),
        ("", ["train.epochs=x"], ["train.epochs", "expected an integer"]),
        ("", ["train.nope=1"], ["train.nope", "unknown key"]),
        ("comm: {progress: thread}\n", [], ["comm.progress", "unknown key"]),  # the progress thread is gone
        ("", ["novalue"], ["--set novalue", "KEY=VALUE"]),
        ("task: {split: [0.5, 0.5]}\n", [], ["task.split"]),
        ("debug: {profile_epoch: -1}\n", [], ["debug.profile_epoch", ">= 0"]),
        ("train: {epochs: 3}\ndebug: {profile_epoch: 4}\n", [], ["debug.profile_epoch", "never runs", "is 3"]),
        ("train: {epochs: 3}\n", ["debug.profile_epoch=9"], ["debug.profile_epoch", "never runs"]),
        # a fault that never fires: a test of a failing rank that cannot fail
        ("train: {epochs: 3}\ndebug: {fail_rank: 1, fail_epoch: 5}\n", [], ["debug.fail_epoch", "never runs", "is 3"]),
        # the stale threshold and the fusion cap where nothing reads them (they were ignored)
        ("strategy: {name: vertex, stale: {theta: 0.3}}\n", [],
         ["strategy.stale.theta", "applies only with mode: static or adaptive"]),
        ("strategy: {name: chunk, fusion: 'off', fusion_memory_mb: 64}\n", [],
         ["strategy.fusion_memory_mb", "applies only with fusion: on"]),
        # the reuse cache's and the incremental aggregation's options with those off (they were ignored)
        ("strategy: {name: sequences, reuse: 'off', cache_mb: 64}\n", [],
         ["strategy.cache_mb", "applies only with reuse: on"]),
        ("strategy: {name: sequences, reuse: 'off'}\n", ["strategy.cache_policy=lru"],
         ["strategy.cache_policy", "applies only with reuse: on"]),
        ("strategy: {name: sequences, incremental: 'off', incremental_threshold: 0.2}\n", [],
         ["strategy.incremental_threshold", "applies only with incremental: on"]),
        # ... and where nothing reads the cache: a sampled input layer (fanouts' last entry), or no cache at all
        ("strategy: {name: sequences, fanouts: [3, 2], cache_mb: 64}\n", [],
         ["strategy.cache_mb: does nothing with fanouts [3, 2]", "the last entry samples 2", "end fanouts with 0"]),
        ("strategy: {name: sequences, fanouts: [0, 5]}\n", ["strategy.cache_policy=lru"],
         ["strategy.cache_policy: does nothing with fanouts [0, 5]"]),
        ("strategy: {name: sequences, fanouts: [3, 2], incremental_threshold: 0.2}\n", [],
         ["strategy.incremental_threshold: does nothing with fanouts [3, 2]"]),
        # a fixed-length list says its length (it read "expected a list or null, got list")
        ("strategy: {name: hybrid, adjuster: {start: [0.2, 0.05, 1]}}\n", [],
         ["strategy.adjuster.start", "expected a list of 2 values or null, got list [0.2, 0.05, 1]"]),
    ],
)
def test_errors_name_file_and_key(tmp_path, small_dataset, text, overrides, needles):
    p = _job(tmp_path, small_dataset, text)
    with pytest.raises(ConfigError) as e:
        load_job(p, overrides)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--set " if overrides else str(p))
    for n in needles:
        assert n in msg, (n, msg)


def test_missing_dataset_directory(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text("data: {path: /nonexistent/ds}\n")
    with pytest.raises(ConfigError, match=r"job.yaml: data.path: dataset directory '/nonexistent/ds' does not exist"):
        load_job(p)


def test_a_path_s_tilde_is_the_home_directory(tmp_path, small_dataset, monkeypatch):
    """``data.path: ~/ds`` (or ``--set data.path=~/ds``: no shell expands it there) was looked for as ./~/ds, and
    ``output.dir``/``checkpoint.dir``/``output.tensorboard`` under ~ made a directory named '~' in the working
    directory; '~' is the home directory now, as in the Python API's path arguments."""
    import shutil

    home = tmp_path / "home"
    home.mkdir()
    shutil.copytree(small_dataset, home / "ds")
    monkeypatch.setenv("HOME", str(home))
    p = tmp_path / "job.yaml"
    p.write_text("data: {path: ~/ds}\noutput: {dir: ~/runs, tensorboard: ~/tb}\ncheckpoint: {dir: ~/ckpt}\n")
    job = load_job(p)
    assert (job.data.path, job.output.dir, job.output.tensorboard, job.checkpoint.dir) == tuple(
        str(home / d) for d in ("ds", "runs", "tb", "ckpt"))
    assert load_job(p, ["data.path=~/ds"]).data.path == str(home / "ds")
    assert job_to_dict(job)["data"]["path"] == str(home / "ds")  # config.resolved.yaml: the directory read
    # what is no home directory stays as written
    assert load_job(p, ["output.dir=a~b"]).output.dir == "a~b"


def _one_error_line(proc, needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert len(lines) == 1, proc.stderr  # reported once, by rank 0
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.mark.parametrize(
    ("section", "needles"),
    [
        ({"train": {"epochz": 3}}, ["job.yaml", "train.epochz", "did you mean 'epochs'"]),
        ({"train": {"epochs": "three"}}, ["job.yaml", "train.epochs", "expected an integer"]),
        ({"data": {"path": "/no/such/dataset"}}, ["job.yaml", "data.path", "/no/such/dataset"]),
    ],
)
def test_config_errors_under_mpirun(launcher, tmp_path, small_dataset, section, needles):
    job = write_job(tmp_path / "job.yaml", small_dataset, **section)
    t0 = time.monotonic()
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job)], timeout=60)
    assert time.monotonic() - t0 < 60
    _one_error_line(proc, needles)


def test_yaml_off_is_the_word_off(tmp_path):
    """YAML 1.1 reads a bare `off` as false; a choice list that offers "off" gets the word back."""
    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {tmp_path / 'data'}}}\nstrategy: {{name: vertex, stale: {{mode: off}}}}\n")
    assert load_job(job).strategy.stale.mode == "off"
    assert load_job(job, ["strategy.stale.mode=static"]).strategy.stale.mode == "static"


# every strategy option, and the strategies that accept it: given to any other strategy it is a config
# error (one line naming the key, the strategy and the strategies that accept it), never silently ignored
STRATEGY_OPTIONS = [
    ("blocks: 2", "blocks", ["snapshot"]),
    ("layout: block", "layout", ["grid", "snapshot"]),
    ("balance: count", "balance", ["pss", "snapshot"]),
    ("transfer: base", "transfer", ["pss", "snapshot"]),
    ("partition: hash", "partition", ["hybrid", "vertex"]),
    ("stale: {mode: adaptive}", "stale", ["chunk", "grid", "vertex"]),
    ("snapshot_ranks: 2", "snapshot_ranks", ["grid"]),
    ("vertex_ranks: 2", "vertex_ranks", ["grid"]),
    ("candidates: [snapshot]", "candidates", ["auto"]),
    ("memory_per_rank: 1GiB", "memory_per_rank", ["auto"]),
    ("chunk_size: 8", "chunk_size", ["chunk"]),
    ("sequences: active", "sequences", ["chunk"]),
    ("fusion: off", "fusion", ["chunk"]),
    ("fusion_memory_mb: 4", "fusion_memory_mb", ["chunk"]),
    ("workload: mlp", "workload", ["chunk"]),
    ("overlap_chunks: 4", "overlap_chunks", ["snapshot"]),
    ("window: 3", "window", ["sequences"]),
    ("fanouts: [5, 2]", "fanouts", ["sequences"]),
    ("placement: fetch", "placement", ["sequences"]),
    ("incremental: off", "incremental", ["sequences"]),
]


@pytest.mark.parametrize(("option", "key", "accepting"), STRATEGY_OPTIONS)
def test_an_option_belongs_to_the_strategies_that_apply_it(tmp_path, option, key, accepting):
    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    for name in ("snapshot", "pss", "vertex", "chunk", "sequences"):
        job.write_text(f"data: {{path: {tmp_path / 'data'}}}\nmodel: {{name: tgcn}}\n"
                       f"strategy: {{name: {name}, {option}}}\n")
        if name in accepting:
            assert load_job(job).strategy.name == name
            continue
        with pytest.raises(ConfigError) as e:
            load_job(job)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(str(job))
        verb = "accepts" if len(accepting) == 1 else "accept"
        assert f"strategy.{key}: not an option of strategy '{name}'" in msg, msg
        assert f"strategy {', '.join(accepting)} {verb} it" in msg, msg


@pytest.mark.parametrize(("option", "key", "accepting"), [
    ("horizon: 2", "horizon", ["regression"]),
    ("decoder_hidden: 4", "decoder_hidden", ["link_prediction"]),
    ("eval_negatives: 9", "eval_negatives", ["temporal_link_prediction"]),
    ("negatives: 2", "negatives", ["link_prediction", "temporal_link_prediction"]),
])
def test_an_option_belongs_to_the_tasks_that_apply_it(tmp_path, option, key, accepting):
    """Task options are declared beside each task: another task's key is one line naming the tasks that take it."""
    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    for name in ("link_prediction", "node_classification", "regression"):
        job.write_text(f"data: {{path: {tmp_path / 'data'}}}\ntask: {{name: {name}, {option}}}\n")
        if name in accepting:
            assert load_job(job).task.name == name
            continue
        with pytest.raises(ConfigError) as e:
            load_job(job)
        msg = str(e.value)
        assert "\n" not in msg and f"task.{key}: not an option of task '{name}'" in msg, msg
        assert f"task {', '.join(accepting)} {'accepts' if len(accepting) == 1 else 'accept'} it" in msg, msg


@pytest.mark.parametrize(("text", "old", "new"), [
    ("train: {blocks: 2}", "train.blocks", "strategy.blocks"),
    ("train: {transfer: base}", "train.transfer", "strategy.transfer"),
    ("stale: {mode: static}", "stale", "strategy.stale"),
])
def test_renamed_keys_say_where_they_went(tmp_path, text, old, new):
    """The keys that release 0.2 moved under ``strategy:`` name their new place (README release note)."""
    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {tmp_path / 'data'}}}\n{text}\n")
    with pytest.raises(ConfigError, match=f"{old}: renamed to {new}"):
        load_job(job)


def test_unknown_option_of_every_strategy_suggests_its_own_keys(tmp_path, small_dataset):
    p = _job(tmp_path, small_dataset, "strategy: {name: chunk, chunk_sise: 8}\n")
    with pytest.raises(ConfigError, match="strategy.chunk_sise: unknown option of strategy 'chunk'; did you mean"):
        load_job(p)


def test_the_config_package_imports_no_strategy_and_builds_no_model():
    """config/ stands below strategies/ and nn/: loading a job needs neither (issue 11, item 5)."""
    import subprocess
    import sys

    code = ("import sys, hpcdgnn.config; "
            "print(sorted(m for m in sys.modules if m.startswith(('hpcdgnn.strategies', 'hpcdgnn.nn'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_active_sequences_need_an_rnn(launcher, tmp_path, small_dataset):
    """strategy.sequences: active with a time encoder that is not a GRU or LSTM is refused by the chunk
    plan on rank 0: one line, exit 2, no run directory."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    strategy={"name": "chunk", "chunk_size": 8, "sequences": "active"})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")], timeout=60)
    _one_error_line(proc, ["strategy.sequences: active needs a model whose time encoder is a GRU or LSTM", "'tmgcn'"])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("text", "value"), [("1e8", 1e8), ("1E-3", 1e-3), ("2.5e+2", 250.0), ("7", 7.0)])
def test_float_keys_take_exponent_notation(tmp_path, small_dataset, text, value):
    """YAML 1.1 reads 1e8 as a string; a float key takes it as the number users mean (in files and --set)."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    assert load_job(job, [f"comm.timeout_s={text}"]).comm.timeout_s == value
    (tmp_path / "f.yaml").write_text(f"data: {{path: {small_dataset}}}\ncomm: {{timeout_s: {text}}}\n")
    assert load_job(tmp_path / "f.yaml").comm.timeout_s == value
    with pytest.raises(ConfigError, match="train.lr: must be > 0"):  # a number, so the range check speaks
        load_job(job, ["train.lr=-1e-3"])
    with pytest.raises(ConfigError, match="train.epochs: expected an integer"):
        load_job(job, ["train.epochs=1e3"])  # integers stay strict


def test_an_lr_adam_cannot_step_with_is_refused_for_the_dtype(tmp_path, small_dataset):
    """A learning rate of 1e38 crashed in Adam's first step (lr / (1 - 0.9) overflows float32): a config error
    instead; the bound is the dtype's, and just under it Adam steps."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    with pytest.raises(ConfigError, match=r"train.lr: must be at most 3.40282346638528\d*e\+37 in float32"):
        load_job(job, ["train.lr=1e38", "train.dtype=float32"])
    assert load_job(job, ["train.lr=1e38", "train.dtype=float64"]).train.lr == 1e38
    lr = load_job(job, ["train.lr=3.4e37", "train.dtype=float32"]).train.lr
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    Adam([p], lr=lr).step()  # the runs' Adam (torch's arithmetic): 3.5e37 raised in it
    assert torch.isfinite(p).all()


def test_set_errors_blame_the_override_not_the_file(tmp_path, small_dataset):
    job = write_job(tmp_path / "job.yaml", small_dataset)
    with pytest.raises(ConfigError) as e:
        load_job(job, ["train.lrr=1"])
    assert str(e.value).startswith("--set train.lrr: unknown key; did you mean 'lr'?")
    with pytest.raises(ConfigError) as e:
        load_job(job, ["strategy.blocks=0"])
    assert str(e.value).startswith("--set strategy.blocks"), str(e.value)
    with pytest.raises(ConfigError) as e:  # a key below the unknown one: the --set made it
        load_job(job, ["model.foo.bar=1"])
    assert str(e.value).startswith("--set model.foo: unknown option of model 'cdgcn'"), str(e.value)
    (tmp_path / "bad.yaml").write_text(f"data: {{path: {small_dataset}}}\ntrain: {{lrr: 1}}\n")
    with pytest.raises(ConfigError) as e:  # the same typo in the file is the file's
        load_job(tmp_path / "bad.yaml", ["train.epochs=2"])
    assert str(e.value).startswith(f"{tmp_path / 'bad.yaml'}: train.lrr: unknown key")


def test_fusion_memory_cap_is_auto_or_a_positive_number(tmp_path, small_dataset):
    """strategy.fusion_memory_mb: ``auto`` (the default, the device's memory) or a number of MiB > 0."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy={"name": "chunk"})
    assert load_job(job).strategy.fusion_memory_mb == "auto"
    assert load_job(job, ["strategy.fusion_memory_mb=1e3"]).strategy.fusion_memory_mb == 1000.0
    assert load_job(job, ["strategy.fusion_memory_mb=auto"]).strategy.fusion_memory_mb == "auto"
    with pytest.raises(ConfigError, match="fusion_memory_mb: must be > 0"):
        load_job(job, ["strategy.fusion_memory_mb=0"])
    with pytest.raises(ConfigError, match="fusion_memory_mb"):
        load_job(job, ["strategy.fusion_memory_mb=lots"])


@pytest.mark.parametrize(("override", "needle"), [
    ("train.lr=.inf", "--set train.lr: expected a finite number, got inf"),
    ("comm.stall_timeout_s=.nan", "--set comm.stall_timeout_s: expected a finite number, got nan"),  # passed `< 0`
    ("checkpoint.every_minutes=-.inf", "--set checkpoint.every_minutes: expected a finite number, got -inf"),
    ("train.seed=100000000000000000000000", "--set train.seed: 100000000000000000000000 is out of range"),
    ("train.threads=100000", "--set train.threads: must be in [0, 1024]"),
    # torch's TCP store timedelta overflowed (a traceback; 1e10 timed out at once), time.sleep raised OverflowError
    ("comm.timeout_s=1e30", "--set comm.timeout_s: must be > 0 and at most 1e+09 seconds"),
    ("debug.delay_seconds=1e30", "--set debug.delay_seconds: must be >= 0 and at most 1e+09 seconds"),
])
def test_numbers_beyond_what_the_run_can_use_are_one_line(tmp_path, small_dataset, override, needle):
    """Non-finite floats (which pass every comparison check: NaN is not < 0), integers beyond 64 bits (a seed
    crashed torch), thread counts beyond any node (torch crashed) and durations beyond int64 nanoseconds are
    refused by name."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    with pytest.raises(ConfigError) as e:
        load_job(job, [override])
    assert needle in str(e.value)


def test_a_job_file_that_is_not_utf8_is_one_line(tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_bytes(b"data:\n  path: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"job.yaml: not UTF-8 text \(byte 14\)"):
        load_job(bad)


def test_a_key_given_twice_is_one_line(tmp_path, small_dataset):
    """PyYAML keeps the last of two equal keys; a job file with two ``train:`` sections would run with half
    of what it says."""
    (tmp_path / "job.yaml").write_text(f"data: {{path: {small_dataset}}}\ntrain: {{epochs: 2}}\n"
                                       "model: {name: cdgcn}\ntrain: {lr: 0.1}\n")
    with pytest.raises(ConfigError, match=r"job.yaml: not valid YAML: key 'train' given twice \(lines 2 and 4\)"):
        load_job(tmp_path / "job.yaml")



def test_yaml_anchors_and_merge_keys_still_load(tmp_path, small_dataset):
    """The duplicate-key check leaves YAML's merge key alone (``<<: *base``, whose keys the mapping may
    override); an unhashable key stays a one-line error."""
    (tmp_path / "job.yaml").write_text(f"data: {{path: {small_dataset}}}\n"
                                       "model: &m {name: cdgcn, hidden: 6}\n"
                                       "train: {<<: {epochs: 2, lr: 0.5}, lr: 0.25}\n")
    job = load_job(tmp_path / "job.yaml")
    assert (job.train.epochs, job.train.lr) == (2, 0.25)
    (tmp_path / "bad.yaml").write_text(f"data: {{path: {small_dataset}}}\n? [1, 2]\n: 3\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML: .*unhashable"):
        load_job(tmp_path / "bad.yaml")


@pytest.mark.parametrize(("override", "needle"), [
    ("strategy.name=[1]", "--set strategy.name: unknown [1]; choose from auto, chunk,"),  # was a TypeError: unhashable
    ("strategy.name={a: 1}", "--set strategy.name: unknown {'a': 1}; choose from"),
    ("train.epochs=[1", "--set train.epochs: value '[1' is not valid YAML: while parsing a flow sequence"),
])
def test_a_strategy_name_that_is_no_string_and_a_bad_set_value_are_one_line(tmp_path, small_dataset, override,
                                                                              needle):
    job = write_job(tmp_path / "job.yaml", small_dataset)
    with pytest.raises(ConfigError) as e:
        load_job(job, [override])
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_yaml_alias_bomb_is_a_short_line_and_does_not_exhaust_memory(tmp_path, small_dataset):
    """Nine levels of nine aliases (a few hundred bytes) are billions of values: the message quotes a bounded
    repr built as such (a full repr() first ran out of memory; six levels made a 5.8 MB line)."""
    lines = ["&a0 ['xxxxxxxx']"] + [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    (tmp_path / "job.yaml").write_text(f"data: {{path: {small_dataset}}}\nmodel:\n  layers:\n"
                                       + "".join(f"    - {ln}\n" for ln in lines))
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        load_job(tmp_path / "job.yaml")
    assert time.perf_counter() - t0 < 10
    assert "model.layers: expected an integer, got list [['xxxxxxxx'" in str(e.value), str(e.value)[:500]
    assert len(str(e.value)) < 300 and "\n" not in str(e.value), str(e.value)[:500]


def test_a_dataset_path_given_by_set_is_blamed_on_the_set(tmp_path, small_dataset):
    """``--set data.path=...`` naming no dataset was reported as the job file's fault."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    with pytest.raises(ConfigError, match=r"^--set data\.path: dataset directory '.*nowhere' does not exist$"):
        load_job(job, [f"data.path={tmp_path / 'nowhere'}"])
    (tmp_path / "job2.yaml").write_text(f"data: {{path: {tmp_path / 'nowhere'}}}\n")
    with pytest.raises(ConfigError, match=r"job2\.yaml: data\.path: dataset directory"):
        load_job(tmp_path / "job2.yaml")


@pytest.mark.parametrize("strategy", ['{name: vertex, stale: {mode: "off", theta: 0.3}}',
                                      '{name: chunk, fusion: "off", fusion_memory_mb: 64}'])
def test_a_run_saved_with_a_key_now_refused_where_it_was_ignored_still_loads(tmp_path, small_dataset, strategy):
    """``stale.theta`` under ``mode: off`` and ``fusion_memory_mb`` under ``fusion: off`` were ignored, and are
    refused now: a new job gets the one line, but an older run's ``config.resolved.yaml`` drops them (nothing
    read them), so that the run resumes and ``embed`` reads it."""
    p = _job(tmp_path, small_dataset, f"strategy: {strategy}\n")
    with pytest.raises(ConfigError, match="applies only with"):
        load_job(p)
    job = load_job(p, resolved=True)
    assert job.strategy.name in ("vertex", "chunk")
    assert getattr(job.strategy, "fusion_memory_mb", "auto") == "auto" and job.strategy.stale.theta == 0.5


@pytest.mark.parametrize("strategy", [
    "{name: sequences, fanouts: [3, 2]}",  # the defaults of the idle keys: not refused
    "{name: sequences, fanouts: [3, 2], reuse: 'off'}",
    "{name: sequences, fanouts: [3, 0], cache_mb: 64, cache_policy: lru, incremental_threshold: 0.2}",
    "{name: sequences, fanouts: [], incremental: 'off'}",
    # a technique switched off where it cannot act: what an A/B by --set flips (bench_reuse's off run)
    "{name: sequences, fanouts: [3, 2], incremental: 'off'}",
    "{name: sequences, reuse: 'off', incremental: 'off'}",
    "{name: sequences, reuse: 'off', incremental_threshold: 10.0}",
])
def test_the_reuse_keys_are_accepted_where_the_cache_serves_or_left_at_their_defaults(tmp_path, small_dataset,
                                                                                     strategy):
    assert load_job(_job(tmp_path, small_dataset, f"strategy: {strategy}\n")).strategy.name == "sequences"


def test_a_run_s_resolved_config_with_an_option_refused_since_still_loads():
    """An idle option (sequences' cache_mb with reuse off) is refused in a job, but a run an older hpcdgnn trained
    with it stays readable: resume, embed, predict and load_run read its config.resolved.yaml."""
    from hpcdgnn.config.load import load_job_dict

    raw = {"data": {"path": "d"}, "model": {"name": "cdgcn"}, "task": {"name": "link_prediction"},
           "strategy": {"name": "sequences", "reuse": "off", "cache_mb": 64}}
    job = load_job_dict(raw, "r/config.resolved.yaml", [], check_paths=False, resolved=True)
    assert job.strategy.cache_mb == 64
    sampled = {**raw, "strategy": {"name": "sequences", "fanouts": [3, 2], "cache_mb": 64, "incremental": "off"}}
    job = load_job_dict(sampled, "r/config.resolved.yaml", [], check_paths=False, resolved=True)
    assert job.strategy.cache_mb == 64
    with pytest.raises(ConfigError, match="strategy.cache_mb: applies only with reuse: on"):
        load_job_dict(raw, "job.yaml", [], check_paths=False)


_ONCE = "; give each key once"


@pytest.mark.parametrize(("overrides", "said"), [
    (["train.epochs=2", "train.epochs=5"],
     "--set train.epochs: given twice (train.epochs=2, then train.epochs=5)" + _ONCE),
    (["train={lr: 0.2}", "train.epochs=5", "train = {lr: 0.1}"],
     "--set train: given twice (train={lr: 0.2}, then train={lr: 0.1})" + _ONCE),
    (["train.epochs=5", "train = {lr: 0.1}"],
     "--set train.epochs: given twice (train.epochs=5, then train={lr: 0.1})" + _ONCE
     + " (a section given whole first, then keys in it, takes those keys on top of it)"),
])
def test_a_key_set_twice_is_refused(tmp_path, small_dataset, overrides, said):
    """Two ``--set`` of one key took the last silently, and a section after a key in it may mean to replace the key
    or keep it: one line."""
    with pytest.raises(ConfigError) as e:
        load_job(_job(tmp_path, small_dataset, ""), overrides)
    assert str(e.value) == said
    assert load_job(_job(tmp_path, small_dataset, ""), ["train.epochs=2", "train.lr=0.1"]).train.epochs == 2


def test_a_key_after_its_section_is_taken_on_top_of_it(tmp_path, small_dataset):
    """A section given whole and then a key in it (``strategy={name: hybrid} strategy.groups=2``) was refused as
    given twice, though it reads one way only: the section, then the key on top of it. It is applied in order, and
    an error in the key names the key, not the section before it."""
    default_seed = load_job(_job(tmp_path, small_dataset, "")).train.seed
    job = load_job(_job(tmp_path, small_dataset, f"train: {{lr: 0.5, seed: {default_seed + 1}}}\n"),
                   ["train={lr: 0.1}", "train.epochs=5", "strategy={name: hybrid}", "strategy.groups=2"])
    # the section given whole replaces the file's (its seed), the key after it refines it
    assert (job.train.epochs, job.train.lr, job.train.seed) == (5, 0.1, default_seed)
    assert (job.strategy.name, job.strategy.groups) == ("hybrid", 2)
    with pytest.raises(ConfigError, match=r"^--set train\.epochs: "):
        load_job(_job(tmp_path, small_dataset, ""), ["train={lr: 0.1}", "train.epochs=-1"])
    assert override_of("train.epochs", ["train={lr: 0.1}", "train.epochs=5"]) == "train.epochs"


@pytest.mark.parametrize("overrides, said", [
    (["strategy={name: hybrid, groups: 3}", "strategy.groups=2"],
     "--set strategy.groups: given twice (strategy={name: hybrid, groups: 3}, then strategy.groups=2)"),
    (["strategy=hybrid", "strategy.groups=2"],
     "--set strategy: expected a mapping (a section, as strategy.groups after it reads), got str")])
def test_a_key_after_a_section_that_gave_it_or_gave_no_mapping_is_refused(tmp_path, small_dataset, overrides, said):
    """A key on top of a section that gave the same key is given twice (the later silently won); a key after a
    section that is no mapping was blamed on the job file ("'strategy' is not a section (in job.yaml)")."""
    with pytest.raises(ConfigError) as e:
        load_job(_job(tmp_path, small_dataset, ""), overrides)
    assert str(e.value).startswith(said), str(e.value)


def test_a_missing_dataset_says_where_it_was_looked_for_and_how_to_prepare_it(tmp_path, monkeypatch):
    """A missing data.path said only that it does not exist: now the working directory a relative path is read
    from, and the job file's header where it holds the prepare command (as jobs/examples/ do)."""
    monkeypatch.chdir(tmp_path)
    bare, documented = tmp_path / "bare.yaml", tmp_path / "documented.yaml"
    bare.write_text("data: {path: inputs/ds}\n")
    documented.write_text("# Data: prepared by\n#   python -m hpcdgnn prepare raw.txt --output inputs/ds\n"
                          "data: {path: inputs/ds}\n")
    here = f"dataset directory 'inputs/ds' does not exist (relative to the working directory {tmp_path})"
    for job, overrides, said in (
            (bare, [], f"{bare}: data.path: {here}"),
            (documented, [], f"{documented}: data.path: {here}; prepare it first: see the header of {documented}"),
            # a path --set gave is not the one the header prepares
            (documented, ["data.path=inputs/ds"], f"--set data.path: {here}"),
            (documented, [f"data.path={tmp_path / 'ds'}"],
             f"--set data.path: dataset directory '{tmp_path / 'ds'}' does not exist")):
        with pytest.raises(ConfigError) as e:
            load_job(job, overrides)
        assert str(e.value) == said
