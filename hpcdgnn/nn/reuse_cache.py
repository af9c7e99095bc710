r"""R3, the reuse cache: ReInc's two-level cache store with its Eq. 3 eviction policy (ReInc §3.3, SPEC R3).

A cache of aggregations keyed by ``(level, layer, t, sample)``:

* ``level`` — ``"global"``: aggregations that can be used by any layer, sample and epoch because they
  depend on no parameter (ReInc §3.3.1: the input aggregations Agg^input_t and the Agg_{t−1} that
  incremental aggregation starts from); ``"local"``: one layer's aggregations of hidden vectors
  (§3.3.2), which depend on the current parameters, so the owner drops them with
  :meth:`ReuseCache.invalidate` before the parameters change (every optimizer step);
* ``layer`` — the model layer whose aggregation it is (0 = the input layer);
* ``t`` — the snapshot;
* ``sample`` — what else the value depends on: which rows and which neighbours were aggregated
  (e.g. ``"all"`` for every vertex over its full neighbourhood). Two accesses hit the same entry
  exactly when their values are equal, so a key must name everything the value depends on.

Both levels share one capacity (``strategy.cache_mb``) for the entries they hold (:meth:`~ReuseCache.shared`
holds none). Values are tensors; their size is
``numel · element_size``. A value handed out must not be modified in place by its reader.

**Access protocol.** An owner declares the accesses it will make, in order (:meth:`ReuseCache.plan`:
DGNN access is fully predictable, §3.3.3), then for each access calls :meth:`ReuseCache.lookup`
(a hit returns the value; a miss returns None) and, after a miss, computes the value and calls
:meth:`ReuseCache.offer` (admit it, maybe evicting others, or not). :meth:`ReuseCache.admits` says
beforehand whether an offer would be admitted, so a caller can compute less when it would not;
:meth:`ReuseCache.fetch` does the three in one call. An owner may also offer values before their
first access (a warm start, as R2 filling the cache at setup).

**Priority policy** (``priority``, ReInc Eq. 3, after GDSF): an entry's score is

.. math::
    \mathrm{Priority}(Agg) = \frac{F(Agg)}{S(Agg)} - I(Agg)

with every term read off the plan at the current clock c (the number of planned accesses made so
far since :meth:`~ReuseCache.plan`):

* F — *future access count*: the planned accesses to the key at positions ≥ c (the rest of the
  plan, which may run into the next epoch: the ``then`` part of :meth:`~ReuseCache.plan`);
* I — *imminence*: the accesses to other keys made before the key's next planned access,
  ``next − c`` (0 = it is the very next access). ReInc counts "the number of timesteps that will be
  passed (computed) without using the aggregation"; here one access is one snapshot-step's
  aggregation read, so the unit is the same;
* S — *size*, in units of ``unit_bytes`` (the owner passes the size of one typical entry, e.g. one
  snapshot's input aggregation, so S = 1 for those and F/S and I are both counts of accesses —
  ReInc's "equal weights").

ReInc's closed forms (F = max(1, 2·idx − 2S + 1)·K − g for an encoder's first layer, I = L − S, …)
are this count for its encoder–decoder LSTM schedule; with the schedule given explicitly the
count is exact for any window, stride, sample order and model — the decoder's reads of future
snapshots included, which the owner lists in the plan where a sample makes them
(:mod:`hpcdgnn.strategies.sequences`). The local level's F = K − g and I = 0 need no plan (below).
On a miss the new entry is admitted if it fits, else the entries of lowest priority *strictly below
the new entry's* are evicted until it fits; if that cannot free enough, the new entry is not admitted
(``bypassed``) — a cache full of aggregations needed sooner keeps them (ties keep the cached entry).
**Expiry**: when an access brings an entry's F to 0 it is dropped at once (``expired``), and
:meth:`~ReuseCache.plan` drops the entries the new plan never reads; an entry with F = 0 is never
admitted.

**LRU policy** (``lru``, for comparison): admit every entry that fits in the capacity at all,
evicting the least recently used first; no expiry (LRU knows no future). On a sliding window of L
snapshots read in order, an LRU cache holding fewer than L − 1 of them evicts every entry just
before its next use: hit rate 0. (ReInc Fig. 11 finds the same 0 % for LRU against 52 % for Eq. 3 at a
cache of 10 % of the data, there from the gates' alternating reads of input and state aggregations.)

**Reads outside the plan.** :meth:`~ReuseCache.peek` returns a held value without an access (no clock,
no counter, no recency): R2 reading Agg_{t−1} to fill a miss of Agg_t incrementally (ReInc §3.3.1,
"During the incremental computation of Agg_t, ReInc gets cached aggregation Agg_{t−1} from the global
cache"), a read no plan can foresee because it happens only on a miss.

**Who made an entry.** :meth:`~ReuseCache.offer` and :meth:`~ReuseCache.fetch` take an optional ``part``
(e.g. ``"encoder"``, ``"decoder"``) and :meth:`~ReuseCache.lookup` the reader's: a hit on an entry that
another part made counts in :meth:`~ReuseCache.cross_hits` — ReInc §3.1's encoder ↔ decoder reuse under
teacher forcing, measured rather than assumed.

**The local level as ReInc's gates use it** (§3.3.2; F = K − g, I = 0 in §3.3.3): an aggregation of a
hidden vector made at gate g = 1 of a cell is read by the K − 1 gates after it at once and then expires.
Under Eq. 3 such an entry is never worth keeping past the step (F reaches 0 within it) and the value is
the step's own tensor, which autograd keeps for the backward anyway. :meth:`~ReuseCache.shared` counts
that pattern — one miss and K − 1 local hits — without storing anything (no capacity used, no eviction
of global entries): a counter on the cells' structural reuse (their gates read the basis in one fused
GEMM), which :func:`local_level` / :func:`count_shared` let a cell report from inside its step.

Counters (:meth:`ReuseCache.counters`, reset by :meth:`~ReuseCache.reset_counters`): hits, misses,
``hit_rate`` = hits / (hits + misses), evictions (capacity), expired, bypassed (not admitted),
invalidated, ``unplanned`` (accesses that were not the planned next one: they do not advance the
clock; a non-zero count means the owner's plan is wrong, which costs hits but never changes values),
``bytes`` (held now) and ``peak_bytes``; hits and misses also by level.
"""

from __future__ import annotations

import bisect
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

__all__ = ["ReuseCache", "POLICIES", "LEVELS", "count_shared", "hit_rate", "local_level"]

POLICIES = ("priority", "lru")
LEVELS = ("global", "local")


@dataclass
class _Entry:
    value: torch.Tensor
    nbytes: int
    part: str | None = None  # who made it (encoder, decoder, setup): what cross_hits counts


def _level(key: Hashable) -> str:
    if not isinstance(key, tuple) or not key or key[0] not in LEVELS:
        raise ValueError(f"ReuseCache: a key is (level, layer, t, sample) with level in {LEVELS} (got {key!r})")
    return key[0]


def _nbytes(value: torch.Tensor) -> int:
    return value.numel() * value.element_size()


class ReuseCache:
    """The two-level cache (module docstring).

    Args:
        capacity_bytes: the bound on the bytes held by both levels together (>= 0; 0 holds nothing).
        policy: ``"priority"`` (ReInc Eq. 3 with expiry) or ``"lru"``.
        unit_bytes: the size that counts as S = 1 in Eq. 3 (> 0).

    Raises:
        ValueError: an unknown policy, a negative capacity or a non-positive unit.
    """

    def __init__(self, capacity_bytes: int, policy: str = "priority", unit_bytes: int = 1 << 20) -> None:
        if policy not in POLICIES:
            raise ValueError(f"ReuseCache: policy must be one of {POLICIES} (got {policy!r})")
        if capacity_bytes < 0:
            raise ValueError(f"ReuseCache: capacity_bytes must be >= 0 (got {capacity_bytes})")
        if not unit_bytes > 0:
            raise ValueError(f"ReuseCache: unit_bytes must be > 0 (got {unit_bytes})")
        self.capacity, self.policy, self.unit = int(capacity_bytes), policy, float(unit_bytes)
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        self._stream: list[Hashable] = []
        self._pos: dict[Hashable, list[int]] = {}
        self.clock = 0
        self.bytes = 0
        self.reset_counters()

    # -- the plan ------------------------------------------------------------------------------------
    def plan(self, stream: Sequence[Hashable], then: Sequence[Hashable] = ()) -> None:
        """Declare the accesses from now on: ``stream`` in order (the clock restarts at its first), then
        ``then`` (what follows it, e.g. the next epoch's accesses: it counts in F and I only).
        With ``priority``, entries that the new plan never reads expire now."""
        self._stream = list(stream)
        self._pos = {}
        for i, key in enumerate([*self._stream, *then]):
            self._pos.setdefault(key, []).append(i)
        self.clock = 0
        if self.policy == "priority":
            for key in [k for k in self._entries if k not in self._pos]:
                self._drop(key)
                self.expired += 1

    def future(self, key: Hashable) -> tuple[int, int | None]:
        """(F, I) of ``key`` at the current clock: planned accesses left, and accesses to other keys before
        the next one (None when F = 0)."""
        pos = self._pos.get(key)
        if not pos:
            return 0, None
        i = bisect.bisect_left(pos, self.clock)
        f = len(pos) - i
        return f, (pos[i] - self.clock if f else None)

    def priority(self, key: Hashable, nbytes: int) -> float:
        """Eq. 3, F/S − I, of ``key`` with a value of ``nbytes``; −inf when F = 0 (expired)."""
        f, imminence = self.future(key)
        if f == 0:
            return float("-inf")
        return f / (nbytes / self.unit) - imminence if nbytes else float("inf")

    # -- accesses ------------------------------------------------------------------------------------
    def lookup(self, key: Hashable, part: str | None = None) -> torch.Tensor | None:
        """One access: the cached value (a hit) or None (a miss: compute it, then :meth:`offer` it).
        ``part``: who reads (a hit on an entry another part made counts in :meth:`cross_hits`)."""
        level = _level(key)
        if self.clock < len(self._stream) and self._stream[self.clock] == key:
            self.clock += 1
        else:
            self.unplanned += 1
        e = self._entries.get(key)
        if e is None:
            self.misses += 1
            self._by_level[level][1] += 1
            return None
        self.hits += 1
        self._by_level[level][0] += 1
        if part is not None and e.part is not None and e.part != part:
            self._cross[e.part, part] += 1
        self._entries.move_to_end(key)
        if self.policy == "priority" and self.future(key)[0] == 0:
            self._drop(key)
            self.expired += 1
        return e.value

    def _victims(self, key: Hashable, nbytes: int) -> list[Hashable] | None:
        """The entries to evict so that ``key`` (``nbytes``) fits, or None when it is not admitted."""
        if nbytes > self.capacity:
            return None
        need = self.bytes + nbytes - self.capacity
        if self.policy == "lru":
            out, freed = [], 0
            for k, e in self._entries.items():  # least recently used first
                if freed >= need:
                    break
                out.append(k)
                freed += e.nbytes
            return out
        mine = self.priority(key, nbytes)
        if mine == float("-inf"):
            return None
        if need <= 0:
            return []
        ranked = sorted(self._entries, key=lambda k: self.priority(k, self._entries[k].nbytes))
        out, freed = [], 0
        for k in ranked:
            if freed >= need:
                break
            if not self.priority(k, self._entries[k].nbytes) < mine:
                return None
            out.append(k)
            freed += self._entries[k].nbytes
        return out if freed >= need else None

    def admits(self, key: Hashable, nbytes: int) -> bool:
        """Whether :meth:`offer` of a value of ``nbytes`` for ``key`` would admit it now (no side effect)."""
        return key in self._entries or self._victims(key, nbytes) is not None

    def peek(self, key: Hashable) -> torch.Tensor | None:
        """The held value of ``key`` or None, outside the plan: no access, no counter, no recency (module
        docstring, *Reads outside the plan*)."""
        e = self._entries.get(key)
        return None if e is None else e.value

    def offer(self, key: Hashable, value: torch.Tensor, part: str | None = None) -> bool:
        """Admit ``value`` for ``key`` after a miss (evicting as the policy says), or not; True if held.
        ``part``: who made it (see :meth:`lookup`)."""
        _level(key)
        if key in self._entries:
            return True
        n = _nbytes(value)
        victims = self._victims(key, n)
        if victims is None:
            self.bypassed += 1
            return False
        for k in victims:
            self._drop(k)
            self.evictions += 1
        self._entries[key] = _Entry(value, n, part)
        self.bytes += n
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        return True

    def fetch(self, key: Hashable, compute: Callable[[], torch.Tensor], nbytes: int,
              part: str | None = None) -> torch.Tensor | None:
        """One access with the miss handled: the cached value; else, when a value of ``nbytes`` would be
        admitted, ``compute()`` admitted and returned; else None (counted ``bypassed``), for a caller that
        then computes only the part it needs. ``part``: who reads and, on a miss, makes the entry."""
        value = self.lookup(key, part)
        if value is not None:
            return value
        if not self.admits(key, nbytes):
            self.bypassed += 1
            return None
        value = compute()
        self.offer(key, value, part)
        return value

    def shared(self, key: Hashable, readers: int) -> None:
        """An aggregation computed once and read by ``readers`` consumers at once (the gates of a cell that
        read it; module docstring, *The local level*): one miss and ``readers`` − 1 hits at ``key``'s
        level. Nothing is stored; the plan and its clock are not involved."""
        level = _level(key)
        self.misses += 1
        self.hits += readers - 1
        self._by_level[level][0] += readers - 1
        self._by_level[level][1] += 1

    def cross_hits(self, maker: str, reader: str) -> int:
        """Hits since :meth:`reset_counters` by ``reader`` on entries that ``maker`` made."""
        return self._cross[maker, reader]

    def invalidate(self, level: str = "local", layer: int | None = None) -> int:
        """Drop every entry of ``level`` (of one ``layer`` if given): their values are stale (a local entry
        after the parameters changed). Returns the number dropped."""
        keys = [k for k in self._entries if k[0] == level and (layer is None or k[1] == layer)]
        for k in keys:
            self._drop(k)
        self.invalidated += len(keys)
        return len(keys)

    def _drop(self, key: Hashable) -> None:
        self.bytes -= self._entries.pop(key).nbytes

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    # -- checkpoints ---------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The entries held, least recently used first (key, value, who made it), for a checkpoint: which
        aggregations a later access hits, and by which path (R2 from a cached Agg_{t-1}, from scratch) a miss
        refills, depend on them, so a resumed run that started with another cache would count other hits and
        could round some values differently. The plan and clock are not saved: the owner declares each
        epoch's plan at its start. At most the capacity in values."""
        return {"policy": self.policy, "capacity": self.capacity,
                "entries": [(k, e.value, e.part) for k, e in self._entries.items()]}

    def load_state_dict(self, state: dict) -> None:
        """Hold exactly the entries of :meth:`state_dict`, in their order (call before the next plan).

        Raises:
            ValueError: the state is of a cache with another policy or capacity.
        """
        if (state["policy"], state["capacity"]) != (self.policy, self.capacity):
            raise ValueError(f"ReuseCache: the saved cache is {state['policy']} with {state['capacity']} bytes, "
                             f"this one {self.policy} with {self.capacity}")
        self._entries = OrderedDict((k, _Entry(v, _nbytes(v), part)) for k, v, part in state["entries"])
        self.bytes = sum(e.nbytes for e in self._entries.values())
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def __len__(self) -> int:
        return len(self._entries)

    # -- counters ------------------------------------------------------------------------------------
    def reset_counters(self) -> None:
        """Zero the counters (the owner's epoch boundary); the peak restarts from the bytes held now."""
        self.hits = self.misses = self.evictions = self.expired = self.bypassed = 0
        self.invalidated = self.unplanned = 0
        self.peak_bytes = self.bytes
        self._by_level = {level: [0, 0] for level in LEVELS}
        self._cross: Counter = Counter()

    COUNTERS = ("hits", "misses", "evictions", "expired", "bypassed", "invalidated", "unplanned", "bytes",
                "peak_bytes", "global_hits", "global_misses", "local_hits", "local_misses")

    def counters(self) -> dict:
        """The counters since :meth:`reset_counters` (names in :attr:`COUNTERS`), with ``hit_rate``."""
        out = {k: getattr(self, k) for k in self.COUNTERS[:9]}
        for level, (h, m) in self._by_level.items():
            out[f"{level}_hits"], out[f"{level}_misses"] = h, m
        out["hit_rate"] = hit_rate(out["hits"], out["misses"])
        return out


def hit_rate(hits: float, misses: float) -> float:
    """The hit rate ``hits / (hits + misses)``; 0 without accesses."""
    return hits / (hits + misses) if hits + misses else 0.0


#: the active local level: (cache, the model's layers by identity -> their index); a stack
_ACTIVE: list[tuple[ReuseCache, dict[int, int]]] = []


@contextmanager
def local_level(cache: ReuseCache, layers: Iterable) -> Iterator[None]:
    """While active, :func:`count_shared` reports to ``cache``'s local level, keyed by each layer's position
    in ``layers`` (an encoder's cells, then a decoder's). A strategy wraps one forward pass in it."""
    _ACTIVE.append((cache, {id(m): i for i, m in enumerate(layers)}))
    try:
        yield
    finally:
        _ACTIVE.pop()


def count_shared(layer, op: tuple, readers: int, what: str = "state") -> None:
    """Called by a graph-RNN cell where it computes a hidden-vector aggregation once for ``readers`` gates
    (ReInc §3.3.2: the basis of H_{t−1} over the step's operator ``op``): :meth:`ReuseCache.shared` on the
    active :func:`local_level`, key ``("local", layer index, t, what)``; nothing when none is active."""
    if _ACTIVE:
        cache, index = _ACTIVE[-1]
        cache.shared(("local", index.get(id(layer), -1), op[0].t, what), readers)
