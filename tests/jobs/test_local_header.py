"""jobs/local.sh's header comment names only variables a user sets (its Environment list) or Open MPI's."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_the_header_names_the_variables_users_set():
    """The header said "--bind-to none unless MPI_FLAGS bind", the script's own array; users set MPIRUN_FLAGS."""
    lines = (REPO / "jobs" / "local.sh").read_text().splitlines()
    header = lines[1:next(i for i, ln in enumerate(lines) if not ln.startswith("#"))]
    start = header.index("# Environment:") + 1
    block = header[start:next(i for i in range(start, len(header)) if not header[i].startswith("#   "))]
    variable = r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"
    listed = set(re.findall(variable, "\n".join(block)))
    named = {n for n in re.findall(variable, "\n".join(header)) if not n.startswith("OMPI_")}
    assert "MPIRUN_FLAGS" in listed and named <= listed, sorted(named - listed)
