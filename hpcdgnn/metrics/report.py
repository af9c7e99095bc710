"""``python -m hpcdgnn report RUNDIR... [--out DIR]``: learning curves and the per-epoch time split as PNGs.

Where they go: ``--out DIR``, which a report never overwrites (a directory the user named may hold anything);
without it, one run's own ``RUNDIR/report/``, which a later report of that run replaces: the figures are derived
from the run's records alone, so redrawing them loses nothing, and they stay with the run they describe instead
of cluttering the current directory. Several runs need ``--out``: no one run's directory is theirs.

``curves.png``: the training loss and every validation / test metric per epoch, one line per run.
``time_split.png``: per run, the slowest rank's load, compute and exposed communication per epoch, stacked
(what the epoch line prints; load + compute + exposed = epoch; an epoch a resume continued within is marked
"from batch B": its time is that of its batches from there on). Scaling plots over many P are
``perf/scaling.py``'s. Needs matplotlib (``pip install hpcdgnn[perf]``).
"""

from __future__ import annotations

from pathlib import Path

from hpcdgnn.errors import ConfigError

__all__ = ["learning_curves", "run_report"]

#: the slowest rank's time split, as stacked (load + compute + comm_exposed = epoch)
SPLIT = ("load", "compute", "comm_exposed")


def learning_curves(records: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """``loss`` and each ``val_*`` / ``test_*`` metric with a value, as (epoch, value) pairs."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        for key, value in r.items():
            wanted = key == "loss" or key.startswith(("val_", "test_"))
            if wanted and isinstance(value, int | float) and not isinstance(value, bool):
                curves.setdefault(key, []).append((r["epoch"], float(value)))
    return curves


def _label(ax, title: str, ylabel: str = "") -> None:
    """Title, whole epochs along x, and the y unit."""
    ax.set_title(title)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.xaxis.get_major_locator().set_params(integer=True)


def _save(plt, fig, axes, path: Path) -> None:
    """One legend (the first panel's), the PNG, the figure freed."""
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: the directory of a report of one run given no --out, inside that run (replaced by the next such report)
OWN_DIR = "report"


def _destination(named: str | None, rundirs: list[Path]) -> tuple[Path, list[Path]]:
    """The report's directory, made, and its two PNG paths (see the module's docstring for where and why).

    Args:
        named: ``--out`` as given, or None.
        rundirs: the runs' directories.
    """
    if named is None:
        if len(rundirs) > 1:
            raise ConfigError(f"report: {len(rundirs)} runs: give --out DIR for their common figures (without "
                              f"--out a report of one run goes into its RUNDIR/{OWN_DIR}/)")
        out = rundirs[0] / OWN_DIR
        what = f"report: {out}"
    else:
        out = Path(named)
        what = f"report --out {out}"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{what}: is a file; give a directory for the figures")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{what}: cannot make the directory ({e.strerror or e}); give another --out") from None
    made = [out / "curves.png", out / "time_split.png"]
    there = [p for p in made if p.exists()]
    if there and named is not None:
        raise ConfigError(f"{what}: {there[0].name} exists; a report never overwrites a directory you name (give "
                          f"a new --out, or none for a run's own RUNDIR/{OWN_DIR}/)")
    return out, made


def run_report(args) -> int:
    """Draw the two figures of the runs in ``args.rundirs`` into ``args.out`` (None: one run's ``RUNDIR/report/``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ConfigError(f"report: needs matplotlib ({e}); pip install matplotlib (or hpcdgnn[perf])") from None
    from hpcdgnn.api import load_run
    from hpcdgnn.errors import DataError

    runs = [load_run(d) for d in args.rundirs]
    # a run's label: its directory's name, or its path where two runs share a name (sweeps' p2/, p4/ ...)
    names = [r.dir.name for r in runs]
    labels = [r.dir.name if names.count(r.dir.name) == 1 else str(d) for r, d in zip(runs, args.rundirs, strict=True)]
    records = dict(zip(labels, (r.metrics for r in runs), strict=True))
    empty = [name for name, recs in records.items() if not recs]
    if empty:
        raise DataError(f"report: {', '.join(empty)}: metrics.jsonl has no epoch records")
    out, made = _destination(args.out, [r.dir for r in runs])

    curves = {name: learning_curves(recs) for name, recs in records.items()}
    keys = list(dict.fromkeys(k for c in curves.values() for k in c))
    cols = min(4, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    # one colour per run in every panel: the legend is the first panel's, and a panel some run lacks (another
    # task's metric) would otherwise draw the next run in the colour the legend gives the first
    colour = {name: f"C{i % 10}" for i, name in enumerate(curves)}
    for ax, key in zip(axes.flat, keys, strict=False):
        for name, c in curves.items():
            if key in c:
                ax.plot(*zip(*c[key], strict=True), marker=".", label=name, color=colour[name])
        _label(ax, key)
    _save(plt, fig, axes, made[0])

    fig, axes = plt.subplots(len(records), 1, figsize=(8, 2.6 * len(records)), squeeze=False)
    for ax, (name, recs) in zip(axes[:, 0], records.items(), strict=True):
        epochs = [r["epoch"] for r in recs]
        bottom = [0.0] * len(recs)
        for part in SPLIT:
            values = [float(r.get("slowest", {}).get(part) or 0.0) for r in recs]
            ax.bar(epochs, values, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        for r, top in zip(recs, bottom, strict=True):  # an epoch a resume continued within: its time is the rest's
            if r.get("resumed_after_batches"):
                ax.annotate(f"from batch {r['resumed_after_batches'] + 1}", (r["epoch"], top), ha="center",
                            va="bottom", fontsize=7)
        _label(ax, f"{name}: the slowest rank's epoch", "seconds")
    _save(plt, fig, axes, made[1])
    for p in made:
        print(p)
    return 0
