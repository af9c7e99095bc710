"""The quick subset's definition: markers `mpi` and `quick` (tests/conftest.py), and what it must hold."""
