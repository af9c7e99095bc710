"""R3's cache (ReInc §3.3): the Eq. 3 priority with expiry and LRU on tiny access sequences computed by hand;
reads outside the plan (peek), hits across model parts, and the local level's counter of the gates' reuse."""

from __future__ import annotations

import pytest
import torch

from hpcdgnn.nn.reuse_cache import ReuseCache, count_shared, local_level
from hpcdgnn.ops.sparse import NormalizedAdjacency


def key(t, level="global", layer=0):
    return (level, layer, t, "all")


def v(units=1):
    """A value of ``units`` · 8 bytes (unit_bytes = 8 below: S = units)."""
    return torch.zeros(units, dtype=torch.float64)


def run(cache, stream, then=(), sizes=None):
    """Plan ``stream`` and make its accesses: lookup, and offer on a miss; the hits' positions."""
    cache.plan([key(t) for t in stream], [key(t) for t in then])
    hits = []
    for i, t in enumerate(stream):
        if cache.lookup(key(t)) is not None:
            hits.append(i)
        else:
            cache.offer(key(t), v((sizes or {}).get(t, 1)))
    return hits


def test_sliding_window_lru_misses_everything_priority_keeps_the_next_one():
    """Windows [0, 1, 2] and [1, 2, 3] (L = 3, stride 1), room for one aggregation.

    LRU: every access misses (each entry is evicted just before its next use), 5 evictions.
    Priority, by hand (clock c = accesses made; F, I after the access):
      0: miss, F = 0                          -> not admitted (expired on arrival)
      1: miss, F = 1 (pos 3), I = 3 - 2 = 1   -> p = 1/1 - 1 = 0, admitted
      2: miss, F = 1 (pos 4), I = 4 - 3 = 1   -> p = 0; entry 1: I = 3 - 3 = 0, p = 1, not below 0: bypassed
      1: hit; F = 0                           -> expired
      2: miss, F = 0 -> bypassed;  3: miss, F = 0 -> bypassed
    """
    lru = ReuseCache(8, "lru", unit_bytes=8)
    assert run(lru, [0, 1, 2, 1, 2, 3]) == []
    c = lru.counters()
    assert (c["hits"], c["misses"], c["evictions"], c["hit_rate"]) == (0, 6, 5, 0.0)
    assert c["bytes"] == 8 and c["peak_bytes"] == 8

    pr = ReuseCache(8, "priority", unit_bytes=8)
    assert run(pr, [0, 1, 2, 1, 2, 3]) == [3]
    c = pr.counters()
    assert (c["hits"], c["misses"], c["evictions"], c["expired"], c["bypassed"]) == (1, 5, 0, 1, 4)
    assert c["hit_rate"] == pytest.approx(1 / 6) and c["bytes"] == 0 and c["unplanned"] == 0


def test_priority_evicts_the_lowest_score_and_size_counts():
    """Stream a b c a b c with room for two units: a, b admitted (p = 1/1 - 2 = -1 each); at c (p = -1)
    a has I = 0 (p = 1), b has I = 1 (p = 0): nothing below -1, so c is bypassed; a and b hit and expire.
    With b of two units (S = 2): at b, c = 2, p_b = 1/2 - (4 - 2) = -3/2 and a (I = 1, p = 0) is not below
    it, so b is bypassed; c then fits beside a; a and c hit, b (F = 0 by then) is bypassed again."""
    c = ReuseCache(16, "priority", unit_bytes=8)
    assert run(c, "abcabc") == [3, 4]
    n = c.counters()
    assert (n["hits"], n["misses"], n["evictions"], n["expired"], n["bypassed"]) == (2, 4, 0, 2, 2)

    c = ReuseCache(16, "priority", unit_bytes=8)
    assert run(c, "abcabc", sizes={"b": 2}) == [3, 5]
    n = c.counters()
    assert (n["bypassed"], n["expired"], n["evictions"]) == (2, 2, 0)

    # an entry of higher priority evicts one of lower: stream x y y x with room for one;
    # x: F = 1, I = 2 -> p = -1, admitted; y at c = 2: F = 1, I = 0 -> p = 1 > x's (I = 3 - 2 = 1: p = 0): evict x
    c = ReuseCache(8, "priority", unit_bytes=8)
    assert run(c, "xyyx") == [2]
    n = c.counters()
    assert (n["evictions"], n["expired"], n["misses"]) == (1, 1, 3)


def test_then_keeps_entries_for_the_next_epoch_and_plan_expires_the_unplanned():
    c = ReuseCache(64, "priority", unit_bytes=8)
    assert run(c, [0, 1], then=[0, 1]) == []
    assert len(c) == 2  # F = 1 each (the next epoch): kept
    assert run(c, [0, 1]) == [0, 1]  # the next epoch: all hits, then expired (no epoch after it)
    assert len(c) == 0 and c.counters()["expired"] == 2
    c.offer(key(5), v())  # F = 0: never admitted
    assert len(c) == 0
    c.plan([key(7)], [])
    c.lookup(key(7))
    c.offer(key(7), v())  # F = 0 after its only access
    assert key(7) not in c
    lru = ReuseCache(64, "lru", unit_bytes=8)
    run(lru, [0, 1])
    lru.plan([key(2)])  # LRU knows no future: nothing expires
    assert len(lru) == 2


def test_levels_invalidate_fetch_and_counters():
    c = ReuseCache(64, "priority", unit_bytes=8)
    stream = [key(0), key(0, "local", 1), key(0, "local", 1), key(0)]
    c.plan(stream)
    calls = []
    assert c.fetch(stream[0], lambda: calls.append(0) or v(), 8) is not None  # miss: computed, admitted
    assert c.fetch(stream[1], lambda: calls.append(1) or v(), 8) is not None
    assert c.fetch(stream[2], lambda: calls.append(2) or v(), 8) is not None  # hit: not computed
    assert calls == [0, 1]
    assert c.invalidate("local") == 0  # the local entry expired at its last use already
    c.offer(key(9, "local", 2), v())  # unplanned: F = 0, not admitted
    assert c.lookup(key(0)) is not None
    n = c.counters()
    assert (n["global_hits"], n["global_misses"], n["local_hits"], n["local_misses"]) == (1, 1, 1, 1)
    assert n["unplanned"] == 0 and n["hit_rate"] == 0.5
    c.lookup(key(3))  # not the planned next access
    assert c.counters()["unplanned"] == 1

    lru = ReuseCache(64, "lru", unit_bytes=8)
    lru.offer(key(0, "local", 1), v())
    lru.offer(key(0, "local", 2), v())
    lru.offer(key(0), v())
    assert lru.invalidate("local", layer=1) == 1 and len(lru) == 2
    assert lru.invalidate("local") == 1 and len(lru) == 1 and lru.bytes == 8
    # too big for the capacity: never admitted, fetch computes nothing and says so
    assert lru.fetch(key(1), lambda: pytest.fail("computed"), 65) is None
    assert lru.counters()["bypassed"] == 1
    lru.reset_counters()
    assert lru.counters()["misses"] == 0 and lru.counters()["peak_bytes"] == 8


def test_decoder_reads_in_the_plan_peek_and_parts():
    """Windows [0, 1, 2] and [1, 2, 3], each followed by its decoder's reads of snapshots 2 and 3 (ReInc's
    snapshot form, teacher-forced): the plan holds them, so after the decoder makes 3 (clock 5) its
    F = 2 (the next window's encoder at 7, its decoder at 8) and I = 7 − 5 = 2 (ReInc's I = L − 1 for a
    decoder-made entry). Hits are told apart by who made the entry and who reads it; peek is no access."""
    c = ReuseCache(64, "priority", unit_bytes=8)
    parts = ["encoder"] * 3 + ["decoder"] * 2
    stream = [(t, p) for t, p in zip([0, 1, 2, 2, 3, 1, 2, 3, 3, 4], parts * 2, strict=True)]
    c.plan([key(t) for t, _ in stream])
    for i, (t, part) in enumerate(stream):
        if c.lookup(key(t), part) is None:
            c.offer(key(t), v(), part)
        if i == 4:
            assert c.future(key(3)) == (2, 2)
            assert c.peek(key(3)) is not None and c.clock == 5 and c.peek(key(9)) is None
    n = c.counters()
    assert (n["hits"], n["misses"], n["unplanned"]) == (5, 5, 0)
    # 2 made by the encoder, hit by the decoder (3) and the next encoder (6); 3 made by the decoder, hit by the
    # next encoder (7) and decoder (8); 1 made by the encoder, hit by the next encoder (5)
    assert c.cross_hits("encoder", "decoder") == 1 and c.cross_hits("decoder", "encoder") == 1
    assert c.cross_hits("decoder", "decoder") == 0  # a part's own entries are no cross hit


def test_local_level_counts_the_gates_reuse_and_holds_nothing():
    """ReInc §3.3.2–3.3.3: an aggregation of a hidden vector read by K gates is one miss and K − 1 hits at the
    local level (F = K − g, I = 0), stored nowhere; a cell reports it through count_shared only while a
    strategy has a local level active, keyed by the layer's position."""
    c = ReuseCache(8, "priority", unit_bytes=8)
    c.offer(key(0), v())  # unplanned: never admitted, and the local level must not evict global entries anyway
    c.shared(("local", 1, 4, "state"), 4)
    n = c.counters()
    assert (n["local_hits"], n["local_misses"], n["global_hits"], n["global_misses"]) == (3, 1, 0, 0)
    assert len(c) == 0 and c.bytes == 0 and n["unplanned"] == 0
    cells, op = [object(), object()], (NormalizedAdjacency(7, None, None),)
    count_shared(cells[1], op, 4)  # no level active: nothing
    assert c.counters()["local_misses"] == 1
    with local_level(c, cells):
        count_shared(cells[1], op, 4)
        count_shared(cells[0], op, 1, "gated")
    n = c.counters()
    assert (n["local_hits"], n["local_misses"]) == (6, 3)
    count_shared(cells[1], op, 4)
    assert c.counters()["local_misses"] == 3


def test_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        ReuseCache(1, "lfu")
    with pytest.raises(ValueError, match="capacity"):
        ReuseCache(-1)
    with pytest.raises(ValueError, match="level"):
        ReuseCache(8).offer(("gpu", 0, 0, "all"), v())


@pytest.mark.parametrize("policy", ["priority", "lru"])
def test_a_restored_cache_continues_as_the_saved_one(policy):
    """A checkpoint's cache (entries, values, makers and LRU order) restored into a fresh cache of the same
    policy and capacity, which set-up filled differently: the next epoch's hits, evictions and held keys are
    the saved cache's; another policy or capacity is refused."""
    saved = ReuseCache(3 * 8, policy, unit_bytes=8)
    run(saved, [0, 1, 2, 3, 1, 0, 4], then=[2, 3, 4, 0])
    saved.lookup(key(3))  # its LRU order differs from the insertion order now
    state = saved.state_dict()
    fresh = ReuseCache(3 * 8, policy, unit_bytes=8)
    for t in (5, 6):  # what set-up offered in the resumed process
        fresh.offer(key(t), v(), "setup")
    fresh.load_state_dict(state)
    assert list(fresh._entries) == list(saved._entries) and fresh.bytes == saved.bytes
    assert all(fresh._entries[k].part == e.part and torch.equal(fresh._entries[k].value, e.value)
               for k, e in saved._entries.items())
    stream = [2, 3, 4, 0, 1, 2]
    for c in (saved, fresh):
        c.reset_counters()
    assert run(fresh, stream) == run(saved, stream)
    assert fresh.counters() == saved.counters() and list(fresh._entries) == list(saved._entries)
    for other in (ReuseCache(3 * 8, "lru" if policy == "priority" else "priority", unit_bytes=8),
                  ReuseCache(4 * 8, policy, unit_bytes=8)):
        with pytest.raises(ValueError, match="the saved cache is"):
            other.load_state_dict(state)


def test_a_cache_restored_within_its_stream_seeks_to_the_saved_clock():
    """A stop after 4 of a stream's 8 accesses (a resume within an epoch): the saved cache, planned again over the
    whole stream and moved to the saved clock, makes the remaining accesses as the uninterrupted cache does —
    hits, admissions, what stays — where left at the stream's start it counts them unplanned and ranks by the
    wrong imminence. A clock outside the stream is refused."""
    stream, then = [0, 1, 2, 0, 3, 1, 2, 3], [0, 1]
    straight = ReuseCache(2 * 8, "priority", unit_bytes=8)
    hits = run(straight, stream, then)
    cut = ReuseCache(2 * 8, "priority", unit_bytes=8)
    run(cut, stream[:4], [*stream[4:], *then])  # the first 4 accesses, planned with all that follows
    state = cut.state_dict()
    assert state["clock"] == 4

    def resumed(clock):
        """The restored cache's hits (stream positions) over the accesses after the stop, and the cache."""
        c = ReuseCache(2 * 8, "priority", unit_bytes=8)
        c.load_state_dict(state)
        c.plan([key(t) for t in stream], [key(t) for t in then])
        c.seek(clock)
        got = []
        for i, t in enumerate(stream[4:], 4):
            if c.lookup(key(t)) is not None:
                got.append(i)
            else:
                c.offer(key(t), v())
        return got, c

    got, c = resumed(state["clock"])
    assert got == [i for i in hits if i >= 4] and list(c._entries) == list(straight._entries)
    assert c.counters()["unplanned"] == 0
    _, wrong = resumed(0)
    assert wrong.counters()["unplanned"] > 0
    with pytest.raises(ValueError, match="clock 9 is outside the planned stream of 8 accesses"):
        c.seek(9)
