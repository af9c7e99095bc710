"""``python -m hpcdgnn report RUNDIR... --out DIR``: learning curves and the per-epoch time split as PNGs.

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


def run_report(args) -> int:
    """Draw the two figures of the runs in ``args.rundirs`` into ``args.out``."""
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
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"report --out {out}: is a file; give a directory for the figures")
    out.mkdir(parents=True, exist_ok=True)
    made = [out / "curves.png", out / "time_split.png"]
    there = [p for p in made if p.exists()]
    if there:
        raise ConfigError(f"report --out {out}: {there[0].name} exists; a report never overwrites (give a new --out)")

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
