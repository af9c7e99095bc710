#!/usr/bin/env bash
# The test command: install (if needed), then run the tests, including the mpirun -np 2 / -np 3 runs.
#   bash tests/run.sh [pytest args...]           the whole suite (~20 min on 2 cores; what CI runs)
#   bash tests/run.sh --quick [pytest args...]   the quick subset (~5 min on 2 cores): every test that starts no MPI
#       job and is not `slow`, and one exactness case per strategy (marked `quick`); see tests/conftest.py
# Other arguments go to pytest as they are, e.g. `bash tests/run.sh --quick -x -k exactness`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash install.sh
VENV=${HPCDGNN_VENV:-.venv}
# no path given: pyproject.toml's testpaths (tests/); a path among the arguments runs just that
exec "$VENV/bin/python" -m pytest -q "$@"
