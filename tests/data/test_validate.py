"""``python -m hpcdgnn validate DIR`` and the run-start check on corrupted datasets (issue 4 item 5).

Each corruption is made so that exactly one kind of check can catch it: the
content edits (dtype, index range, NaN) are resealed (the manifest's bytes and
sha256 rewritten to match the edited shard), so the content check, not the
checksum, must name the fault. Every case must end ``validate`` and
``mpirun -np 3 ... run`` with exit code 2 and one ``hpcdgnn: error: FILE: fault``
line, and the run must not hang.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcdgnn.data.manifest import load_manifest, save_manifest
from hpcdgnn.data.validate import check_dataset, validate_dataset
from hpcdgnn.errors import DataError
from tests.conftest import REPO, SMALL_N, SMALL_T, make_dataset, mpi_env, write_job
from tests.data._corrupt import reseal

SHARD = "shard-00001.h5"  # snapshots 3..5 (3 per shard): owned by rank 1 at P = 3
GROUP = "t000004"


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """A valid dataset, T = 7, N = 23, three shards; copied per case, never modified."""
    return make_dataset(tmp_path_factory.mktemp("validate") / "clean", SMALL_T, SMALL_N, 40)


def _reseal(root: Path, file: str = SHARD) -> None:
    """Rewrite the manifest's bytes/sha256 of ``file`` to match its edited contents."""
    reseal(root, file, load_manifest, save_manifest)


def _data_offset(path: Path, name: str) -> tuple[int, int]:
    """File offset and byte size of a contiguous dataset's raw data."""
    with h5py.File(path, "r") as f:
        ds = f[name]
        assert ds.chunks is None and ds.compression is None, "the flip needs contiguous, uncompressed storage"
        return ds.id.get_offset(), ds.id.get_storage_size()


def _flip_bytes(path: Path, offset: int, count: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        data = bytearray(f.read(count))
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


# ---- the six corruptions: each returns (file the message must name, keyword of the fault) --------------


def _truncated(root: Path):
    shard = root / "shards" / SHARD
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size // 2)
    return shard, rf"{size // 2} bytes but manifest says {size} \(truncated"


def _flipped(root: Path):
    # invert the bytes of the first column index: it becomes negative, so the range check sees it too,
    # but the size is unchanged and the manifest is not resealed, so sha256 is the first fault
    shard = root / "shards" / SHARD
    offset, size = _data_offset(shard, f"{GROUP}/indices")
    assert size >= 4
    _flip_bytes(shard, offset, 4)
    return shard, r"sha256 differs from the manifest"


def _wrong_dtype(root: Path):
    shard = root / "shards" / SHARD
    with h5py.File(shard, "r+") as f:
        x = f[f"{GROUP}/x"][()]
        del f[f"{GROUP}/x"]
        f[f"{GROUP}/x"] = x.astype(np.int64)
    _reseal(root)
    return shard, rf"{GROUP}: 'x' has dtype int64, expected float32"


def _out_of_range(root: Path):
    shard = root / "shards" / SHARD
    with h5py.File(shard, "r+") as f:
        ind = f[f"{GROUP}/indices"]
        assert ind.shape[0] > 0
        ind[0] = SMALL_N  # one past the last vertex
    _reseal(root)
    return shard, rf"{GROUP}: 'indices' has a vertex outside \[0, {SMALL_N}\).*{SMALL_N}.*out of range"


def _missing_key(root: Path):
    path = root / "manifest.json"
    raw = json.loads(path.read_text())
    del raw["num_vertices"]
    path.write_text(json.dumps(raw))
    return path, r"missing key 'num_vertices'$"


def _nan_feature(root: Path):
    shard = root / "shards" / SHARD
    with h5py.File(shard, "r+") as f:
        f[f"{GROUP}/x"][5, 1] = np.nan
    _reseal(root)
    return shard, rf"{GROUP}: 'x' contains NaN .*vertex 5, feature 1"


CORRUPTIONS = {
    "truncated": _truncated,
    "flipped_bytes": _flipped,
    "wrong_dtype": _wrong_dtype,
    "out_of_range_index": _out_of_range,
    "missing_manifest_key": _missing_key,
    "nan_feature": _nan_feature,
}


@pytest.fixture(params=sorted(CORRUPTIONS))
def corrupted(request, clean, tmp_path):
    """(dataset dir, file the error must name, regex of the fault) for one corruption."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    named, fault = CORRUPTIONS[request.param](root)
    return root, named, fault


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hpcdgnn", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=mpi_env())


def _error_line(stderr: str) -> str:
    """The single ``hpcdgnn: error:`` line of ``stderr`` (asserts there is exactly one)."""
    lines = [line for line in stderr.splitlines() if "hpcdgnn: error:" in line]
    assert len(lines) == 1, stderr
    return lines[0]


def _assert_names(line: str, named: Path, fault: str) -> None:
    prefix = f"hpcdgnn: error: {named}: "
    assert line.startswith(prefix), line
    assert re.search(fault, line[len(prefix) :]), (fault, line)


# ---- validate DIR ------------------------------------------------------------------------------------------


def test_valid_dataset_validates(clean):
    proc = _cli("validate", str(clean))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{clean}: valid"
    assert proc.stderr == ""
    assert validate_dataset(clean) == []
    check_dataset(clean)  # no exception


def test_validate_cli_reports_each_corruption(corrupted):
    """Exit 2; the last stderr line is ``hpcdgnn: error: FILE: fault``, one line, no traceback."""
    root, named, fault = corrupted
    proc = _cli("validate", str(root))
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    last = proc.stderr.rstrip("\n").splitlines()[-1]
    assert _error_line(proc.stderr) == last
    _assert_names(last, named, fault)
    # check_dataset (the run-start check) raises the same first problem
    with pytest.raises(DataError) as e:
        check_dataset(root)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(f"{named}: ")


def test_flipped_bytes_also_fail_the_content_check(clean, tmp_path):
    """The flipped index bytes are caught by sha256 first and, without checksums, by the range check."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    shard, _ = _flipped(root)
    with_hash = validate_dataset(root)
    assert with_hash[0] == f"{shard}: sha256 differs from the manifest (file modified or corrupt)"
    without = validate_dataset(root, checksums=False)
    assert len(without) == 1 and without == with_hash[1:]
    assert without[0].startswith(f"{shard}: {GROUP}: 'indices' has a vertex outside [0, {SMALL_N}): column index -")


@pytest.mark.parametrize("how", ["cli", "api"])
def test_no_checksums_skips_only_the_hash(clean, tmp_path, how):
    """A same-size edit that leaves every array valid fails the sha256 check only; --no-checksums passes it."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    shard = root / "shards" / SHARD
    offset, _ = _data_offset(shard, f"{GROUP}/x")
    with h5py.File(shard, "r") as f:
        before = f[f"{GROUP}/x"][()]
    _flip_bytes(shard, offset, 1)  # lowest mantissa byte of x[0, 0]: a different finite float
    with h5py.File(shard, "r") as f:
        after = f[f"{GROUP}/x"][()]
    assert np.isfinite(after).all() and (after != before).sum() == 1
    if how == "cli":
        proc = _cli("validate", str(root))
        assert proc.returncode == 2
        _assert_names(_error_line(proc.stderr), shard, "sha256")
        proc = _cli("validate", "--no-checksums", str(root))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"{root}: valid"
    else:
        assert validate_dataset(root) == [f"{shard}: sha256 differs from the manifest (file modified or corrupt)"]
        assert validate_dataset(root, checksums=False) == []


def test_no_checksums_still_finds_content_faults(clean, tmp_path):
    """Without the hash a NaN (manifest not resealed: the sha256 is stale) is still found."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    shard = root / "shards" / SHARD
    with h5py.File(shard, "r+") as f:
        f[f"{GROUP}/weights"][2] = np.inf
    proc = _cli("validate", "--no-checksums", str(root))
    assert proc.returncode == 2
    _assert_names(_error_line(proc.stderr), shard, rf"{GROUP}: 'weights' contains (NaN or )?Inf.*edge 2")


def test_missing_key_messages(clean, tmp_path):
    """Every required manifest key, when deleted, is named in a one-line message on manifest.json."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    path = root / "manifest.json"
    good = json.loads(path.read_text())
    for key in ("num_snapshots", "shards", "index_dtype", "snapshot_nnz", "format", "version"):
        raw = dict(good)
        del raw[key]
        path.write_text(json.dumps(raw))
        with pytest.raises(DataError) as e:
            validate_dataset(root)
        assert str(e.value).startswith(f"{path}: ") and f"'{key}'" in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("num_vertices", "23", "'num_vertices'"),
        ("num_vertices", 0, "'num_vertices'"),
        ("snapshot_nnz", 5, "'snapshot_nnz'"),
        ("index_dtype", "float32", "'index_dtype'"),
        ("shards", [{"file": "../x.h5", "t_start": 0, "t_stop": 7, "bytes": 1, "sha256": "0" * 64}], "'shards'"),
        ("shards", [{"file": "shard-00000.h5", "t_start": 0, "t_stop": 7, "bytes": "1", "sha256": "0" * 64}], "bytes"),
        ("feature_names", "in_degree", "'feature_names'"),
    ],
)
def test_manifest_types_are_checked(clean, tmp_path, key, value, words):
    """A manifest value of the wrong type is a one-line DataError on manifest.json, not a crash."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    path = root / "manifest.json"
    raw = json.loads(path.read_text())
    raw[key] = value
    path.write_text(json.dumps(raw))
    proc = _cli("validate", str(root))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    line = _error_line(proc.stderr)
    assert line.startswith(f"hpcdgnn: error: {path}: ") and words in line, line


def test_shard_attribute_num_vertices_checked(clean, tmp_path):
    """N in a shard's attributes must agree with the manifest."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    shard = root / "shards" / SHARD
    with h5py.File(shard, "r+") as f:
        f.attrs["num_vertices"] = SMALL_N + 1
    _reseal(root)
    assert validate_dataset(root) == [f"{shard}: attribute num_vertices = {SMALL_N + 1}, manifest says N = {SMALL_N}"]


# ---- the same checks at run start, P = 3 -------------------------------------------------------------------


def _run3(launcher, job: Path):
    t0 = time.monotonic()
    try:
        proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job)], timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("mpirun -np 3 hung (> 60 s) on a corrupt dataset")
    return proc, time.monotonic() - t0


# the CLI test above reports every corruption; under mpirun -np 3 two of them (one caught by the hash, one
# by the structure check) show the run-start check ends every rank with one line, no hang
@pytest.mark.parametrize("kind", ["truncated", "wrong_dtype"])
def test_run_p3_exits_2_with_one_line(launcher, clean, tmp_path, kind):
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    named, fault = CORRUPTIONS[kind](root)
    job = write_job(tmp_path / "job.yaml", root, train={"epochs": 1})
    proc, elapsed = _run3(launcher, job)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    _assert_names(_error_line(proc.stderr), named, fault)


def test_run_p3_structure_still_finds_nan(launcher, clean, tmp_path):
    """``data.validate: structure`` skips the hashes (a stale sha256 passes) but still finds a NaN."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    shard = root / "shards" / SHARD
    with h5py.File(shard, "r+") as f:
        f[f"{GROUP}/x"][7, 0] = np.nan  # not resealed: the manifest's sha256 is now wrong
    assert "sha256" in validate_dataset(root)[0]  # with checksums the stale hash is the first fault
    job = write_job(tmp_path / "job.yaml", root, data={"validate": "structure"}, train={"epochs": 1})
    proc, _ = _run3(launcher, job)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = _error_line(proc.stderr)
    _assert_names(line, shard, rf"{GROUP}: 'x' contains NaN .*vertex 7, feature 0")
    assert "sha256" not in line


def test_a_negative_edge_weight_is_named_not_blamed_on_the_learning_rate(clean, tmp_path):
    """A negative weight made the GCN's degrees negative: the run stopped with 'training loss is nan ... lower
    train.lr', blaming the lr for a data fault. The check names the shard and edge."""
    root = tmp_path / "ds"
    shutil.copytree(clean, root)
    shard = root / "shards" / SHARD
    with h5py.File(shard, "r+") as f:
        f[f"{GROUP}/weights"][3] = -5.0
    proc = _cli("validate", "--no-checksums", str(root))
    assert proc.returncode == 2
    _assert_names(_error_line(proc.stderr), shard, rf"{GROUP}: 'weights' has a negative weight \(first at edge 3")
