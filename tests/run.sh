#!/usr/bin/env bash
# The test command: install (if needed), then run the tests, including the mpirun -np 2 / -np 3 runs.
#   bash tests/run.sh [pytest args...]           the whole suite (what CI runs; its time: issues' CI notes)
#   bash tests/run.sh --quick [pytest args...]   the quick subset (~5 min on 2 cores): every test that starts no MPI
#       job and is not `slow`, and one exactness case per strategy (marked `quick`); see tests/conftest.py
# Other arguments go to pytest as they are, e.g. `bash tests/run.sh --quick -x -k exactness`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash install.sh
VENV=${HPCDGNN_VENV:-.venv}
# two pytest workers (HPCDGNN_TEST_WORKERS; 1 = none): most tests wait on a launched job's start-up (one core
# each), so two at a time use both cores; a file's tests stay on one worker (its module fixtures are built once)
WORKERS=${HPCDGNN_TEST_WORKERS:-2}
PARALLEL=()
if [ "$WORKERS" -gt 1 ]; then PARALLEL=(-n "$WORKERS" --dist loadfile); fi
# byte-compile the checkout once: with PYTHONDONTWRITEBYTECODE set (as on the CI machine) every launched rank
# otherwise compiles hpcdgnn's modules from source again, ~0.4 s of each of the suite's ~1,500 processes
# (compileall writes the files whatever that variable says, and only for sources changed since)
"$VENV/bin/python" -m compileall -q -j 0 hpcdgnn tests perf >/dev/null
# no path given: pyproject.toml's testpaths (tests/); a path among the arguments runs just that
exec "$VENV/bin/python" -m pytest -q ${PARALLEL[@]+"${PARALLEL[@]}"} "$@"
