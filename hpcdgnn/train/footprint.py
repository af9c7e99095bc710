"""A lower bound on the memory a job needs per rank, checked before anything is built.

A size typed one digit too long would otherwise end in an unexplained out-of-memory kill minutes into set-up.
:func:`check_footprint` refuses such a job in one line naming the dominant key. Every term (parameters with
Adam's moments, full-batch activations, link-prediction pairs, TGN batches) is a *lower* bound, so a job that
fits is never refused; it is compared with :func:`~hpcdgnn.comm.device.memory_share`.
"""

from __future__ import annotations

from hpcdgnn.errors import ConfigError

__all__ = ["HOST_RESIDENT", "check_footprint", "lower_bound", "out_of_memory_error"]

#: terms held in host memory whatever the device (the event regime's node memory: numpy arrays or an MPI window
#: whose rows each batch copies to the device): a GPU job checks them against the host's share
HOST_RESIDENT = frozenset({"node memory"})


def lower_bound(job, manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
    """Per term: (bytes the rank needs at least, the keys that set it), from the job's regime."""
    from hpcdgnn.regimes import regime_of

    return regime_of("model", job.model.name).footprint(job, manifest, num_ranks)


def check_footprint(job, manifest, num_ranks: int, available: int, where: str, terms: str = "all") -> None:
    """Refuse (one line) a job whose lower bound exceeds ``available`` bytes for this rank.

    Args:
        job: the resolved job.
        manifest: its dataset's manifest.
        num_ranks: P.
        available: bytes this rank may use of the memory ``terms`` names.
        where: the job file, or None.
        terms: ``all`` (a CPU job: ``available`` is the host's share), ``device`` (a GPU's share: the terms not
            :data:`HOST_RESIDENT`) or ``host`` (a GPU job's host share: those terms only).

    Raises:
        ConfigError: names the bound, what the rank has, and the term that dominates with its keys.
    """
    def bound(ranks: int) -> dict[str, tuple[int, str]]:
        return {k: v for k, v in lower_bound(job, manifest, ranks).items()
                if terms == "all" or (k in HOST_RESIDENT) == (terms == "host")}

    try:
        parts = bound(num_ranks)
    except ConfigError as e:  # widths whose weights cannot even be counted (regimes.base.meta_build)
        raise ConfigError(f"{where}: {e}" if where else str(e)) from None
    if not parts:
        return
    need = sum(b for b, _ in parts.values())
    if need <= available:
        return
    name, (most, keys) = max(parts.items(), key=lambda kv: kv[1][0])
    # more ranks are advice only where they shrink the term (not the parameters every rank holds whole, nor a
    # batch whose split the job's own keys set)
    wider = bound(2 * num_ranks).get(name, (most, ""))[0]
    spread = " or spread the job over more ranks or nodes" if wider < most else ""
    raise ConfigError(
        f"{where}: this job needs at least {_size(need)} per rank ({name} {_size(most)}, set by {keys}) and this "
        f"rank has {_size(available)} (its share of the node's memory); lower those" + spread
    )


def _size(nbytes: float) -> str:
    """GiB with a thousands separator, or below one GiB the unit that shows it (a 1 KiB budget is not 0.0 GiB)."""
    from hpcdgnn.data.writer import human_bytes

    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else human_bytes(nbytes)


def out_of_memory_error(job, manifest, num_ranks: int, detail: str) -> ConfigError:
    """The one line for an allocation larger than the rank has: the keys that size this job's terms (its
    regime's, e.g. ``model.neighbors`` and ``task.eval_negatives`` for TGN), most demanding first."""
    parts = sorted(lower_bound(job, manifest, num_ranks).values(), key=lambda p: -p[0])
    keys = list(dict.fromkeys(k.strip() for _, ks in parts for k in ks.split(",") if k.strip()))
    return ConfigError(f"out of memory ({detail}); the job needs more than this rank has: lower "
                       f"{', '.join(keys) or 'its sizes'}, or spread it over more ranks or nodes")

