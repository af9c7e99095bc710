#!/usr/bin/env bash
# The test command: install (if needed) and run the whole suite, including the mpirun -np 2 / -np 3 tests.
#   bash tests/run.sh [pytest args...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash install.sh
VENV=${HPCDGNN_VENV:-.venv}
exec "$VENV/bin/python" -m pytest tests -q "$@"
