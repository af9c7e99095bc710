"""``hpcdgnn validate DIR`` and the run-start check: is this dataset directory sound?

The checks of :mod:`hpcdgnn.data.inspect` without the statistics, for both on-disk
kinds. ``run`` validates on rank 0 and broadcasts the verdict, so a corrupt input ends
every rank with the same one-line message and exit code 2, never a hang.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hpcdgnn.errors import DataError

__all__ = ["validate_dataset", "add_validate_arguments", "run_validate"]


def validate_dataset(root: str | Path, *, checksums: bool = True) -> list[str]:
    """Validate a dataset directory; return the list of problems (``file: problem``), empty when sound.

    Raises:
        DataError: the manifest itself is missing or malformed (nothing else can be checked).
    """
    from hpcdgnn.data.inspect import inspect_dataset  # late: keeps the CLI import light

    return inspect_dataset(root, checksums=checksums)["problems"]


def check_dataset(root: str | Path, *, checksums: bool = True) -> None:
    """Raise :class:`DataError` naming the first problem (and how many others) if the dataset is unsound."""
    problems = validate_dataset(root, checksums=checksums)
    if problems:
        more = len(problems) - 1
        raise DataError(problems[0] + (f" (and {more} more problem(s); run 'python -m hpcdgnn validate {root}')"
                                       if more else ""))


def add_validate_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``hpcdgnn validate`` arguments to ``parser``."""
    parser.description = ("Validate a dataset directory: manifest, shard checksums, dtypes, shapes, index ranges, "
                          "NaN/Inf.")
    parser.add_argument("root", metavar="DIR", help="dataset directory written by 'hpcdgnn prepare' or 'generate'")
    parser.add_argument("--no-checksums", action="store_true", help="skip the sha256 check of each shard (faster)")


def run_validate(args: argparse.Namespace) -> int:
    """Print every problem, one per line, then raise the first as the error (exit 2); print ``valid`` otherwise."""
    problems = validate_dataset(args.root, checksums=not args.no_checksums)
    if not problems:
        print(f"{args.root}: valid")
        return 0
    for p in problems[1:]:
        print(p)
    more = len(problems) - 1
    raise DataError(problems[0] + (f" (and {more} more problem(s), listed above)" if more else ""))
