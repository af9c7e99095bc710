r"""R3, the reuse cache: ReInc's two-level cache store with its Eq. 3 eviction policy (ReInc §3.3, SPEC R3).

Keys are ``(level, layer, t, sample)``: ``"global"`` entries depend on no parameter (input aggregations,
§3.3.1); ``"local"`` ones are a layer's hidden aggregations (§3.3.2), dropped by :meth:`ReuseCache.invalidate`
before each optimizer step. ``sample`` must name everything else the value depends on. Both levels share
one capacity; a value handed out must not be modified in place. The owner declares its accesses in order
(:meth:`ReuseCache.plan`, §3.3.3), so the ``priority`` policy reads off the plan

.. math::
    \mathrm{Priority}(Agg) = \frac{F(Agg)}{S(Agg)} - I(Agg)          (ReInc Eq. 3)

with F the planned accesses left, I the accesses to other keys before the next one and S the size in
``unit_bytes``. A miss evicts entries of priority strictly below the new one's, else is ``bypassed``;
an entry whose F reaches 0 expires. ``lru`` is the comparison policy (ReInc Fig. 11)."""

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
    """The two-level cache.

    Args:
        capacity_bytes: the bound on the bytes held by both levels together (>= 0; 0 holds nothing).
        policy: ``"priority"`` (ReInc Eq. 3 with expiry) or ``"lru"``.
        unit_bytes: the size that counts as S = 1 in Eq. 3 (> 0).

    Raises:
        ValueError: an unknown policy, a negative capacity or a non-positive unit."""

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

    def plan(self, stream: Sequence[Hashable], then: Sequence[Hashable] = ()) -> None:
        """Declare the accesses from now on: ``stream`` in order, then ``then`` (counts in F and I only)."""
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
        """(F, I) of ``key`` at the current clock (I None when F = 0)."""
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

    def lookup(self, key: Hashable, part: str | None = None) -> torch.Tensor | None:
        """One access: the cached value (a hit) or None (a miss); ``part`` is the reader (for :meth:`cross_hits`)."""
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
            for k, e in self._entries.items():
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
        """The held value of ``key`` or None, outside the plan (R2's read of Agg_{t−1}, ReInc §3.3.1)."""
        e = self._entries.get(key)
        return None if e is None else e.value

    def offer(self, key: Hashable, value: torch.Tensor, part: str | None = None) -> bool:
        """Admit ``value`` for ``key`` after a miss (evicting as the policy says), or not; True if held."""
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
        """One access with the miss handled: the value, ``compute()`` if it would be admitted, else None (bypassed)."""
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
        """Count one miss and ``readers`` − 1 hits for a value read by several gates at once; stores nothing."""
        level = _level(key)
        self.misses += 1
        self.hits += readers - 1
        self._by_level[level][0] += readers - 1
        self._by_level[level][1] += 1

    def cross_hits(self, maker: str, reader: str) -> int:
        """Hits since :meth:`reset_counters` by ``reader`` on entries that ``maker`` made."""
        return self._cross[maker, reader]

    def invalidate(self, level: str = "local", layer: int | None = None) -> int:
        """Drop every entry of ``level`` (of one ``layer`` if given); returns the number dropped."""
        keys = [k for k in self._entries if k[0] == level and (layer is None or k[1] == layer)]
        for k in keys:
            self._drop(k)
        self.invalidated += len(keys)
        return len(keys)

    def _drop(self, key: Hashable) -> None:
        self.bytes -= self._entries.pop(key).nbytes

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def state_dict(self) -> dict:
        """The entries held, least recently used first (key, value, maker): later hits and R2 refills depend on them;
        and the clock, the accesses of the planned stream made (where :meth:`seek` takes a resume within it)."""
        return {"policy": self.policy, "capacity": self.capacity, "clock": self.clock,
                "entries": [(k, e.value, e.part) for k, e in self._entries.items()]}

    def seek(self, clock: int) -> None:
        """Continue the stream :meth:`plan` declared at its access ``clock`` (a run resumed within it), so that
        F and I (Eq. 3) are those of the uninterrupted run.

        Raises:
            ValueError: ``clock`` outside 0 .. the stream's length.
        """
        if not 0 <= clock <= len(self._stream):
            raise ValueError(f"ReuseCache: clock {clock} is outside the planned stream of {len(self._stream)} accesses")
        self.clock = int(clock)

    def load_state_dict(self, state: dict) -> None:
        """Hold exactly the entries of :meth:`state_dict`, in their order, at its clock (a :meth:`plan` after it
        restarts the clock: a resume then seeks the saved one, :meth:`seek`).

        Raises:
            ValueError: the state is of a cache with another policy or capacity.
        """
        if (state["policy"], state["capacity"]) != (self.policy, self.capacity):
            raise ValueError(f"ReuseCache: the saved cache is {state['policy']} with {state['capacity']} bytes, "
                             f"this one {self.policy} with {self.capacity}")
        self._entries = OrderedDict((k, _Entry(v, _nbytes(v), part)) for k, v, part in state["entries"])
        self.clock = int(state.get("clock", 0))
        self.bytes = sum(e.nbytes for e in self._entries.values())
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def __len__(self) -> int:
        return len(self._entries)

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


# the active local level: (cache, layer identity -> index); a stack
_ACTIVE: list[tuple[ReuseCache, dict[int, int]]] = []


@contextmanager
def local_level(cache: ReuseCache, layers: Iterable) -> Iterator[None]:
    """While active, :func:`count_shared` reports to ``cache``'s local level, keyed by layer position."""
    _ACTIVE.append((cache, {id(m): i for i, m in enumerate(layers)}))
    try:
        yield
    finally:
        _ACTIVE.pop()


def count_shared(layer, op: tuple, readers: int, what: str = "state") -> None:
    """Report a cell's hidden aggregation read by ``readers`` gates (ReInc §3.3.2) to the active local level."""
    if _ACTIVE:
        cache, index = _ACTIVE[-1]
        cache.shared(("local", index.get(id(layer), -1), op[0].t, what), readers)
