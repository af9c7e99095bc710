"""Link prediction (IBM §2.2, §6.1): histogram AUC, time split, edge decoder, negatives, loss sums."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from hpcdgnn.ops import decoder
from hpcdgnn.tasks import split_steps
from hpcdgnn.tasks.base import Embeddings, Scored
from hpcdgnn.tasks.link_prediction import (
    AUC_BINS,
    AUC_RANGE,
    EdgeDecoder,
    LinkPrediction,
    LinkPredictionOptions,
    auc_from_histograms,
    rebinned,
    score_stats_torch,
)
from hpcdgnn.tasks.temporal_link_prediction import TIE
from tests.conftest import auc_test_logits, numpy_score_stats
from tests.tasks.conftest import N, T, raw_pairs

# --------------------------------------------------------------------------------------------
# AUC from histograms vs the exact pairwise AUC
# --------------------------------------------------------------------------------------------


def exact_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(s_pos > s_neg) + P(s_pos == s_neg) / 2 over all positive-negative pairs."""
    gt = (pos[:, None] > neg[None, :]).sum()
    eq = (pos[:, None] == neg[None, :]).sum()
    return float((gt + 0.5 * eq) / (pos.size * neg.size))


def bin_of(scores: np.ndarray) -> np.ndarray:
    """Bin of a logit: AUC_BINS equal bins over [-AUC_RANGE, AUC_RANGE], out-of-range values clipped."""
    width = 2 * AUC_RANGE / AUC_BINS
    return np.clip(np.floor((scores + AUC_RANGE) / width).astype(np.int64), 0, AUC_BINS - 1)


def hist(scores: np.ndarray) -> np.ndarray:
    """Histogram of logits over the AUC bins."""
    return np.bincount(bin_of(scores), minlength=AUC_BINS).astype(np.float64)


def tie_bound(pos: np.ndarray, neg: np.ndarray) -> float:
    """Documented bound: half the fraction of positive-negative pairs sharing a bin."""
    return float(0.5 * (hist(pos) * hist(neg)).sum() / (pos.size * neg.size))


class _Ranks:
    """The all-reduce (max) over the vectors several simulated ranks pass, in turn: each call of rank r's
    :func:`rebinned` gets the maximum over every rank's vector of that round."""

    size = 2

    def __init__(self, vectors: list[np.ndarray]) -> None:
        self.top = np.max(vectors, axis=0)

    def allreduce_array(self, values, op: str, tag: str) -> np.ndarray:
        assert op == "max" and tag == "metrics"
        return self.top


def _held_and_stats(parts: list[tuple[np.ndarray, np.ndarray]], splits: int = 3):
    """One rank's held (split, logits, positive) and its fixed-grid stats (the task's layout, split 1 only)."""
    width = 3 + 2 * AUC_BINS
    stats, held = np.zeros(splits * width), []
    for x, positive in parts:
        logits, pos_mask = torch.from_numpy(x), torch.from_numpy(positive)
        stats[width + 1] += x.size
        pos_hist, neg_hist = stats[width + 3: width + 3 + AUC_BINS], stats[width + 3 + AUC_BINS: 2 * width]
        stats[width + 2] += score_stats_torch(logits, pos_mask, AUC_BINS, AUC_RANGE, pos_hist, neg_hist)
        held.append((1, logits.to(torch.float64), pos_mask))
    return held, stats, width


def _range_vector(held, stats, width, splits: int = 3) -> np.ndarray:
    """What :func:`rebinned` all-reduces on a rank (recorded by a one-rank pass whose all-reduce echoes)."""
    seen = {}

    class Echo:
        def allreduce_array(self, values, op, tag):
            seen["v"] = np.asarray(values, dtype=np.float64)
            return seen["v"]

    rebinned(held, stats, Echo(), splits, width, AUC_BINS, AUC_RANGE)
    return seen["v"]


def test_crowded_logits_get_bins_of_their_own_range_on_any_number_of_ranks():
    """Logits within 0.015 of each other around -0.3 (as a first epoch's on CollegeMsg) fill 8 of the fixed
    0.002-wide bins, the positives above the negatives inside each: the fixed-grid AUC counts those pairs as ties
    and is off by several hundredths; binned over the logits' own [min, max] it is the exact AUC. Two ranks
    holding halves of the pairs give the same histograms as one rank holding all."""
    rng = np.random.default_rng(5)
    width_fixed = 2 * AUC_RANGE / AUC_BINS
    first = np.floor((-0.3 + AUC_RANGE) / width_fixed)  # 8 fixed bins from about -0.3 on
    f = rng.random(1200)
    x = -AUC_RANGE + (first + rng.integers(0, 8, 1200) + f) * width_fixed
    positive = f > 0.5  # within each fixed bin the positives lie above the negatives: ties there count half
    exact = exact_auc(x[positive], x[~positive])
    held, stats, width = _held_and_stats([(x, positive)])
    fixed = auc_from_histograms(stats[width + 3: width + 3 + AUC_BINS], stats[width + 3 + AUC_BINS: 2 * width])
    assert abs(fixed - exact) > 0.005  # the case the fixed bins get wrong
    one, _ = rebinned(held, stats, _Ranks([_range_vector(held, stats, width)]), 3, width, AUC_BINS, AUC_RANGE)
    got = auc_from_histograms(one[width + 3: width + 3 + AUC_BINS], one[width + 3 + AUC_BINS: 2 * width])
    assert got == pytest.approx(exact, abs=1e-4)
    np.testing.assert_array_equal(one[: width + 3], stats[: width + 3])  # loss, pairs, correct untouched
    halves = [_held_and_stats([(x[:500], positive[:500])]), _held_and_stats([(x[500:], positive[500:])])]
    ranks = _Ranks([_range_vector(*h) for h in halves])
    summed = sum(rebinned(*h[:2], ranks, 3, h[2], AUC_BINS, AUC_RANGE)[0] for h in halves)
    np.testing.assert_array_equal(summed, one)


def test_logits_alike_but_for_rounding_tie_on_any_number_of_ranks():
    """Logits equal but for rounding (a crowd no wider than an ulp, which three ranks compute an ulp apart where
    one rank computes them bitwise alike) were binned over their own rounding-wide range: one rank read AUC 0.5
    (all in one bin), three ranks 1.0 (the positives an ulp higher, in the top bin). Bins are never narrower than
    TIE: both read 0.5. A crowd spread by more than TIE is still resolved."""
    rng = np.random.default_rng(7)
    positive = rng.random(600) < 0.5
    one = np.full(600, 0.3)
    three = np.where(positive, np.nextafter(0.3, 1.0), 0.3)  # the positives rounding up on the other ranks

    def auc(stats, width):
        return auc_from_histograms(stats[width + 3: width + 3 + AUC_BINS], stats[width + 3 + AUC_BINS: 2 * width])

    held, stats, width = _held_and_stats([(one, positive)])
    alone, _ = rebinned(held, stats, _Ranks([_range_vector(held, stats, width)]), 3, width, AUC_BINS, AUC_RANGE)
    parts = [_held_and_stats([(three[r::3], positive[r::3])]) for r in range(3)]
    ranks = _Ranks([_range_vector(*h) for h in parts])
    summed = sum(rebinned(*h[:2], ranks, 3, h[2], AUC_BINS, AUC_RANGE)[0] for h in parts)
    assert auc(alone, width) == 0.5
    assert auc(summed, width) == 0.5
    spread = np.where(positive, 0.3 + 4 * TIE, 0.3)
    held, stats, width = _held_and_stats([(spread, positive)])
    out, _ = rebinned(held, stats, _Ranks([_range_vector(held, stats, width)]), 3, width, AUC_BINS, AUC_RANGE)
    assert auc(out, width) == 1.0


def test_an_outlier_never_makes_the_bins_coarser_than_the_fixed_ones():
    """One logit at 1e5 among N(0, 1) scores (a diverging epoch's): bins over the raw [min, max] would put the bulk
    into a few bins (AUC 0.52 for an exact 0.585); the range is cut to [-R, R], the outlier clipped into the end
    bin as with the fixed bins, and the AUC stays the fixed bins' or better."""
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0.3, 1, 4000), rng.normal(0, 1, 4000)]
    positive = np.r_[np.ones(4000, bool), np.zeros(4000, bool)]
    x[0] = 1e5
    exact = exact_auc(x[positive], x[~positive])
    held, stats, width = _held_and_stats([(x, positive)])
    fixed = auc_from_histograms(stats[width + 3: width + 3 + AUC_BINS], stats[width + 3 + AUC_BINS: 2 * width])
    out, _ = rebinned(held, stats, _Ranks([_range_vector(held, stats, width)]), 3, width, AUC_BINS, AUC_RANGE)
    got = auc_from_histograms(out[width + 3: width + 3 + AUC_BINS], out[width + 3 + AUC_BINS: 2 * width])
    assert abs(got - exact) <= abs(fixed - exact) + 1e-12 and abs(got - exact) < 1e-3


def test_rebinning_keeps_the_fixed_bins_where_the_kept_scores_are_not_the_summed_ones():
    """Scores kept that the sums do not hold (a pass whose sums were dropped) on any rank: the fixed bins stay,
    on every rank alike (the flag rides in the all-reduce)."""
    rng = np.random.default_rng(1)
    x, positive = rng.normal(size=300), rng.random(300) < 0.5
    held, stats, width = _held_and_stats([(x, positive)])
    extra = held + [(1, torch.from_numpy(x[:10]), torch.from_numpy(positive[:10]))]
    ranks = _Ranks([_range_vector(held, stats, width), _range_vector(extra, stats, width)])
    assert rebinned(held, stats, ranks, 3, width, AUC_BINS, AUC_RANGE)[0] is stats


@pytest.mark.parametrize("seed", range(6))
def test_auc_exact_when_every_score_has_its_own_bin(seed):
    """With no two scores in one bin the histogram AUC is the exact AUC."""
    rng = np.random.default_rng(seed)
    npos, nneg = rng.integers(1, 200, 2)
    bins = rng.choice(AUC_BINS, size=npos + nneg, replace=False)
    width = 2 * AUC_RANGE / AUC_BINS
    scores = -AUC_RANGE + (bins + rng.uniform(0.05, 0.95, bins.size)) * width
    pos, neg = scores[:npos], scores[npos:]
    assert tie_bound(pos, neg) == 0.0  # precondition: no two scores share a bin
    assert auc_from_histograms(hist(pos), hist(neg)) == pytest.approx(exact_auc(pos, neg), abs=1e-12)


def test_auc_exact_on_extremes():
    """Perfect, inverted and all-tied scores give 1, 0 and 1/2."""
    width = 2 * AUC_RANGE / AUC_BINS
    lo, hi = np.array([-AUC_RANGE + width / 2]), np.array([AUC_RANGE - width / 2])
    assert auc_from_histograms(hist(hi), hist(lo)) == 1.0
    assert auc_from_histograms(hist(lo), hist(hi)) == 0.0
    same = np.array([0.3, 0.3])
    assert auc_from_histograms(hist(same), hist(same)) == 0.5 == exact_auc(same, same)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("spread", [0.05, 3.0, 40.0])
def test_auc_within_documented_bound_with_shared_bins(seed, spread):
    """Shared bins (and clipping): |AUC_hist - AUC| <= half the fraction of same-bin pairs."""
    rng = np.random.default_rng([seed, int(spread * 100)])
    pos = np.round(rng.normal(0.3 * spread, spread, rng.integers(50, 400)), 3)  # rounding: exact ties too
    neg = np.round(rng.normal(0.0, spread, rng.integers(50, 400)), 3)
    bound = tie_bound(pos, neg)
    assert bound > 0  # precondition: some pairs share a bin (spread 40 also clips to the end bins)
    got = auc_from_histograms(hist(pos), hist(neg))
    assert abs(got - exact_auc(pos, neg)) <= bound + 1e-12


def test_auc_nan_without_positives_or_negatives():
    """No positives or no negatives: NaN."""
    h = hist(np.array([0.1, 0.2]))
    assert np.isnan(auc_from_histograms(np.zeros(AUC_BINS), h))
    assert np.isnan(auc_from_histograms(h, np.zeros(AUC_BINS)))


# --------------------------------------------------------------------------------------------
# Time split
# --------------------------------------------------------------------------------------------

FRACTIONS = [
    (0.7, 0.15, 0.15),
    (1.0, 0.0, 0.0),
    (0.5, 0.5, 0.0),
    (0.01, 0.01, 0.98),
    (0.34, 0.33, 0.33),
    (0.9, 0.05, 0.05),
    (0.2, 0.0, 0.8),
    (0.6, 0.3, 0.1),
]


@pytest.mark.parametrize("fractions", FRACTIONS)
def test_split_steps_cover_every_step_once_in_time_order(fractions):
    """Train / val / test cover 0..n-1 once, in order, train non-empty, sizes follow fractions."""
    for n in range(0, 80):
        ranges = split_steps(n, fractions)
        assert len(ranges) == 3
        steps = list(itertools.chain.from_iterable(ranges))
        assert steps == list(range(n)), (n, ranges)
        assert all(r.step == 1 for r in ranges)
        if n >= 1:
            assert len(ranges[0]) >= 1, (n, ranges)
            # sizes follow the fractions to within one step
            assert abs(len(ranges[0]) - fractions[0] * n) <= 1, (n, ranges)
            assert abs(len(ranges[0]) + len(ranges[1]) - (fractions[0] + fractions[1]) * n) <= 1, (n, ranges)


# --------------------------------------------------------------------------------------------
# Edge decoder
# --------------------------------------------------------------------------------------------


def decoder_np(dec: EdgeDecoder, z: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """lin2(relu(lin1([z_src ; z_dst]))) in numpy from the decoder's own parameters."""
    w1, b1 = dec.lin1.weight.detach().double().numpy(), dec.lin1.bias.detach().double().numpy()
    w2, b2 = dec.lin2.weight.detach().double().numpy(), dec.lin2.bias.detach().double().numpy()
    h = np.maximum(np.concatenate([z[src], z[dst]], axis=1) @ w1.T + b1, 0.0)
    return (h @ w2.T + b2)[:, 0]


def test_edge_decoder_is_mlp_on_concatenation():
    """EdgeDecoder = lin2(relu(lin1([z_src ; z_dst]))) in value and in gradient."""
    torch.manual_seed(0)
    dec = EdgeDecoder(4, 6).double()
    g = torch.Generator().manual_seed(1)
    z = torch.randn(10, 4, dtype=torch.float64, generator=g, requires_grad=True)
    src = torch.randint(0, 10, (50,), generator=g)
    dst = torch.randint(0, 10, (50,), generator=g)
    out = dec(z, src, dst)
    ref_np = decoder_np(dec, z.detach().numpy(), src.numpy(), dst.numpy())
    np.testing.assert_allclose(out.detach().numpy(), ref_np, rtol=1e-12, atol=1e-13)
    assert (ref_np > 0).any() and (ref_np < 0).any()
    # same gradients as the plain Linear-on-concatenation formulation
    ref = dec.lin2(torch.relu(dec.lin1(torch.cat([z[src], z[dst]], dim=1)))).squeeze(-1)
    gout = torch.randn(50, dtype=torch.float64, generator=g)
    grads = torch.autograd.grad(out, [z, *dec.parameters()], gout)
    grads_ref = torch.autograd.grad(ref, [z, *dec.parameters()], gout)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------------------------
# LinkPrediction on a real dataset
# --------------------------------------------------------------------------------------------

CFG = LinkPredictionOptions(split=(0.5, 0.25, 0.25), negatives=2, decoder_hidden=5)


def make_task(manifest, seed=7, cfg=CFG, emb=3, torch_seed=0) -> LinkPrediction:
    """A float64 LinkPrediction head with a decoder drawn from a fixed torch seed."""
    torch.manual_seed(torch_seed)
    return LinkPrediction(cfg, manifest, emb, seed).double()


def test_targets_are_raw_edges_of_next_snapshot(task_data, smoothed_data):
    """Step t's positives are the raw edges of t+1, also in a smoothed dataset."""
    for _, m, reader in (task_data, smoothed_data):
        task = make_task(m)
        task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm=None)
        assert sorted(task.targets) == list(range(T - 1))  # the last snapshot has no t+1
        for t, (s, d) in task.targets.items():
            pairs = list(zip(s.tolist(), d.tolist(), strict=True))
            assert len(pairs) == len(set(pairs)) == m.snapshot_edges[t + 1]
            assert set(pairs) == raw_pairs(t + 1)  # raw edges, even when A_t was smoothed
    assert smoothed_data[1].smoothed and smoothed_data[1].snapshot_nnz != smoothed_data[1].snapshot_edges


def test_negatives_deterministic_in_seed_epoch_step(task_data):
    """Negatives depend on (seed, epoch, t) only, and change with each of them."""
    _, m, _ = task_data
    a, b = make_task(m, seed=7), make_task(m, seed=7, torch_seed=5)  # another decoder init, same seed
    m_ = 60
    for t, epoch in [(0, 0), (3, 1), (5, 9)]:
        sa, da = a._negatives(t, epoch, m_)
        sb, db = b._negatives(t, epoch, m_)
        assert torch.equal(sa, sb) and torch.equal(da, db)
        assert sa.dtype == torch.int64 and int(sa.min()) >= 0 and int(max(sa.max(), da.max())) < N
    base = torch.stack(a._negatives(2, 3, m_))
    assert not torch.equal(base, torch.stack(a._negatives(2, 4, m_)))  # next epoch: new pairs
    assert not torch.equal(base, torch.stack(a._negatives(1, 3, m_)))  # other step
    assert not torch.equal(base, torch.stack(make_task(m, seed=8)._negatives(2, 3, m_)))  # other seed


def _reference(task: LinkPrediction, emb: dict[int, torch.Tensor], epoch: int):
    """Per-split BCE sums, pair counts, correct counts and logits, in numpy, from the task's parts."""
    loss, pairs, correct = np.zeros(3), np.zeros(3), np.zeros(3)
    logits = {s: ([], []) for s in range(3)}
    for t, z in emb.items():
        s = next((i for i, r in enumerate(task.ranges) if t in r), -1)
        if s < 0:
            continue
        pos = np.array(sorted(raw_pairs(t + 1)), dtype=np.int64)
        ns, nd = task._negatives(t, epoch, len(pos) * task.cfg.negatives)
        zn = z.detach().numpy()
        lp = decoder_np(task.decoder, zn, pos[:, 0], pos[:, 1])
        ln = decoder_np(task.decoder, zn, ns.numpy(), nd.numpy())
        loss[s] += np.logaddexp(0, -lp).sum() + np.logaddexp(0, ln).sum()
        pairs[s] += lp.size + ln.size
        correct[s] += (lp > 0).sum() + (ln <= 0).sum()
        logits[s][0].append(lp)
        logits[s][1].append(ln)
    return loss, pairs, correct, {s: (np.concatenate(p), np.concatenate(n)) for s, (p, n) in logits.items() if p}


def _emb(seed=3, dim=3):
    g = torch.Generator().manual_seed(seed)
    return {t: (2 * torch.randn(N, dim, dtype=torch.float64, generator=g)).requires_grad_(True) for t in range(T)}


def test_forward_loss_and_metrics_match_independent_computation(task_data):
    """Loss sum, counts, accuracy and AUC equal a numpy BCE over positives and negatives."""
    _, m, reader = task_data
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm=None)
    assert [list(r) for r in task.ranges] == [[0, 1, 2], [3], [4, 5]]  # precondition: all splits used
    emb = _emb()
    batch = task(emb, epoch=4)
    loss, pairs, correct, logits = _reference(task, emb, 4)
    assert float(batch.loss_sum) == pytest.approx(loss[0], rel=1e-12)
    assert task.global_train_count() == pairs[0]  # the loss denominator, known without reading shards
    met = task.metrics(batch.stats)
    for s, name in enumerate(("train", "val", "test")):
        assert met[f"{name}_loss"] == pytest.approx(loss[s] / pairs[s], rel=1e-12)
        assert met[f"{name}_acc"] == correct[s] / pairs[s]
        p, n = logits[s]
        assert abs(met[f"{name}_auc"] - exact_auc(p, n)) <= tie_bound(p, n) + 1e-12
    # the loss is differentiable to the train embeddings and the decoder
    batch.loss_sum.backward()
    assert all(float(emb[t].grad.abs().sum()) > 0 for t in task.ranges[0])
    assert all(float(p.grad.abs().sum()) > 0 for p in task.decoder.parameters())


def test_the_task_keeps_what_it_scored_and_rebins_it(task_data):
    """With scores held, the forward's logits are kept and :meth:`rebin` bins them over their own range (one
    rank: its own [min, max]); loss, pairs and correct counts stay; the AUC is then within the new bins' tie
    bound of the exact one; without holding, or after :meth:`hold_scores` (False), ``stats`` is returned as is."""
    _, m, reader = task_data
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple(range(T))), comm=None)
    emb = _emb(seed=7)

    class One:
        def allreduce_array(self, values, op, tag):
            return np.asarray(values, dtype=np.float64)

    first = task(emb, epoch=2).stats
    assert task.rebin(One(), first)[0] is first  # nothing held: the sums as they are
    task.hold_scores(True)
    with torch.no_grad():
        batch = task(emb, epoch=2)
    out, _ = task.rebin(One(), batch.stats)
    assert out is not batch.stats
    width = 3 + 2 * AUC_BINS
    *_, logits = _reference(task, emb, 2)
    met = task.metrics(out)
    for s, name in enumerate(("train", "val", "test")):
        np.testing.assert_array_equal(out[s * width: s * width + 3], batch.stats[s * width: s * width + 3])
        p, n = logits[s]
        lo, hi = min(p.min(), n.min()), max(p.max(), n.max())
        step = (hi - lo) / AUC_BINS
        same = sum(int(((p >= a) & (p < a + step)).sum()) * int(((n >= a) & (n < a + step)).sum())
                   for a in lo + step * np.arange(AUC_BINS) if ((p >= a) & (p < a + step)).any())
        assert abs(met[f"{name}_auc"] - exact_auc(p, n)) <= 0.5 * same / (p.size * n.size) + 1e-9
    task.hold_scores(False)
    with torch.no_grad():
        again = task(emb, epoch=2)
    assert task.rebin(One(), again.stats)[0] is again.stats


def test_two_ranks_sum_to_one_rank(task_data):
    """Stats and loss sums split over two 'ranks' add up to the one-rank values (histograms exactly)."""
    _, m, reader = task_data
    emb = _emb(seed=11)
    one = make_task(m)
    one.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm=None)
    full = one(emb, epoch=1)
    parts = []
    for snaps in ([0, 1], [2, 3, 4, 5, 6]):
        task = make_task(m)  # same torch seed: same decoder on every rank
        task.setup(reader, Scored(snapshots=tuple(snaps)), comm=None)
        parts.append(task({t: emb[t] for t in snaps}, epoch=1))
    width = 3 + 2 * AUC_BINS
    for s in range(3):
        hs = slice(s * width + 3, (s + 1) * width)
        assert np.array_equal(parts[0].stats[hs] + parts[1].stats[hs], full.stats[hs])
    np.testing.assert_allclose(parts[0].stats + parts[1].stats, full.stats, rtol=1e-12)
    assert float(parts[0].loss_sum + parts[1].loss_sum) == pytest.approx(float(full.loss_sum), rel=1e-12)


def test_rank_without_train_steps_still_reaches_every_embedding(task_data):
    """A rank with no train step returns a zero loss connected to every Z_t and the decoder."""
    _, m, reader = task_data
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple([4, 5, 6])), comm=None)  # test steps and the unscored last snapshot
    emb = {t: z for t, z in _emb().items() if t in (4, 5, 6)}
    batch = task(emb, epoch=0)
    assert float(batch.loss_sum) == 0.0
    batch.loss_sum.backward()
    for z in emb.values():
        assert z.grad is not None and float(z.grad.abs().sum()) == 0.0
    assert all(p.grad is not None for p in task.decoder.parameters())


def test_loss_depends_on_every_embedding_when_train_steps_present(task_data):
    """Task.forward contract: loss_sum reaches every Z_t."""
    _, m, reader = task_data
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm=None)
    emb = _emb()
    task(emb, epoch=0).loss_sum.backward()
    missing = [t for t, z in emb.items() if z.grad is None]
    assert missing == [], f"no gradient path to Z_t for t in {missing}"


def test_snapshot_work_is_larger_on_train_steps(task_data):
    """Per scored pair: hidden x 2.7 + 4 on train steps with the compiled decoder loop (x 5 with torch's
    passes), hidden + 4 elsewhere; the last snapshot scores nothing."""
    _, m, _ = task_data
    cfg = LinkPredictionOptions(split=(0.5, 0.25, 0.25), negatives=3, decoder_hidden=8)
    work = LinkPrediction.snapshot_work(cfg, m)
    train = split_steps(T - 1, cfg.split)[0]
    assert work.shape == (T,) and work[T - 1] == 0.0  # snapshot T-1 scores nothing
    per_pair = np.array([work[t] / (m.snapshot_edges[t + 1] * (1 + cfg.negatives)) for t in range(T - 1)])
    base = per_pair[[t for t in range(T - 1) if t not in train]]
    assert np.all(base == 8 + 4.0)
    from hpcdgnn.ops import kernels

    assert np.allclose(per_pair[list(train)], (2.7 if kernels.expected() else 5.0) * 8 + 4.0)


def test_negatives_are_splitmix64_draws_sorted_by_source():
    """draw_negatives bit for bit against a plain-Python splitmix64 with exact big-integer products: the
    first m draws, sorted, are the sources, the next m the destinations — through either sort (few pairs
    next to N, or many) — and the draws are uniform over V."""
    from hpcdgnn.ops.negatives import draw_negatives, negatives_key

    mask = (1 << 64) - 1

    def stream(key, count, n):
        out = []
        for i in range(1, count + 1):
            z = (key + i * 0x9E3779B97F4A7C15) & mask
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
            out.append(((z ^ (z >> 31)) * n) >> 64)
        return np.array(out, dtype=np.int64)

    for seed, epoch, t, n, m in [(0, 1, 0, 7, 40), (3, 2, 5, 1000, 37), (9, 0, 2, 2**32 - 1, 5), (1, 1, 1, 5, 0)]:
        pairs = draw_negatives(seed, epoch, t, n, m)
        ref = stream(negatives_key(seed, epoch, t), 2 * m, n)
        assert pairs.shape == (2, m) and pairs.dtype == np.int64
        np.testing.assert_array_equal(pairs[0], np.sort(ref[:m]))
        np.testing.assert_array_equal(pairs[1], ref[m:])
    assert len({negatives_key(s, e, t) for s in range(4) for e in range(4) for t in range(4)}) == 64
    big = draw_negatives(5, 1, 3, 10, 200_000)
    for side in big:  # 20,000 expected per vertex: a binomial sd of ~134, so 6 sd is 800
        assert np.abs(np.bincount(side, minlength=10) - 20_000).max() < 800
    with pytest.raises(ValueError, match="N = 0"):
        draw_negatives(0, 0, 0, 0, 3)


@pytest.mark.parametrize("n", [300, 100_000])  # counting sort (m >= N / 8), sort (few pairs per step)
def test_negatives_of_many_steps_in_one_call_are_each_steps_own(n):
    """An epoch's steps drawn in one call give each step exactly the pairs it gets drawn alone: grouping never
    changes a pair."""
    from hpcdgnn.ops.negatives import draw_negatives, draw_negatives_joined, draw_negatives_steps

    steps, counts = list(range(3, 43)), [900 + 37 * j for j in range(40)]
    together = draw_negatives_steps(11, 4, steps, n, counts)
    offsets = [1000 * j for j in range(len(steps))]  # rows of stacked steps: added in the same pass
    shifted, bounds = draw_negatives_joined(11, 4, steps, n, counts, offsets)
    for t, m, pairs in zip(steps, counts, together, strict=True):
        np.testing.assert_array_equal(pairs, draw_negatives(11, 4, t, n, m))
    np.testing.assert_array_equal(shifted, np.concatenate(together, axis=1) + np.repeat(offsets, counts))
    np.testing.assert_array_equal(draw_negatives_joined(11, 4, steps[:2], n, counts[:2], offsets[:2])[0],
                                  shifted[:, : bounds[2]])  # fewer steps, offsets too


def test_evaluation_rows_of_a_block_are_projected_without_autograd_and_scored_later(task_data, monkeypatch):
    """Scored from a time-ordered block (as the snapshot strategy hands it), the evaluation steps' rows are
    projected without autograd — their backward would be work for nothing — and only when the metric sums
    are read; the loss, the metric sums and the gradients equal the independent computation."""
    _, m, reader = task_data
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm=None)
    g = torch.Generator().manual_seed(5)
    block = (2 * torch.randn(T, N, 3, dtype=torch.float64, generator=g)).requires_grad_(True)
    emb = Embeddings.of_block(block, list(range(T)))
    projected = []
    project = decoder._project  # the decoder's first layer, whichever path calls it

    def recording(z, w1):
        projected.append((z.shape[0], torch.is_grad_enabled() and z.requires_grad))
        return project(z, w1)

    monkeypatch.setattr(decoder, "_project", recording)
    batch = task(emb, epoch=2)
    # train steps 0-2 are positions 0-2: their rows with autograd, now; steps 3-6 (val, test, unscored)
    # without, when the metric sums are first read (after the backward, in a strategy's step)
    assert projected == [(3 * N, True)]
    loss, pairs, correct, _ = _reference(task, {t: block[t] for t in range(T)}, 2)
    assert float(batch.loss_sum) == pytest.approx(loss[0], rel=1e-12)
    met = task.metrics(batch.stats)
    assert projected == [(3 * N, True), (4 * N, False)]
    assert task.metrics(batch.stats) == met and len(projected) == 2  # scored once
    for s, name in enumerate(("train", "val", "test")):
        assert met[f"{name}_loss"] == pytest.approx(loss[s] / pairs[s], rel=1e-12)
        assert met[f"{name}_acc"] == correct[s] / pairs[s]
    batch.loss_sum.backward()
    assert all(float(block.grad[t].abs().sum()) > 0 for t in task.ranges[0])
    assert float(block.grad[3:].abs().sum()) == 0.0
    assert all(float(p.grad.abs().sum()) > 0 for p in task.decoder.parameters())
    # without autograd (an evaluation pass) one projection serves every split
    projected.clear()
    with torch.no_grad():
        again = task(emb, epoch=2)
    assert projected == [(T * N, False)]
    np.testing.assert_allclose(again.stats, batch.stats, rtol=1e-12)


def test_one_rank_in_place_rows_are_scored_as_the_block(task_data):
    """At P = 1 a task set up in place (vertex, chunk) scores its rows as the snapshot strategy's block — in
    key order t * N + v, gathered once where the strategy keeps another order — with the same sums as the
    in-place path; where rows are missing (or P > 1) the in-place path stays."""
    from hpcdgnn.tasks.base import RowShard, ShardedEmbeddings

    _, m, reader = task_data
    g = torch.Generator().manual_seed(9)
    block = (2 * torch.randn(T, N, 3, dtype=torch.float64, generator=g))
    perm = np.random.default_rng(3).permutation(T * N)  # the strategy's row order (chunk: chunk by chunk)
    keys = perm.astype(np.int64)

    def shard(keys, P=1):
        return RowShard(keys, N, 0, lambda k: np.zeros(k.shape[0], np.int64), lambda k: k, list(range(T)), P)

    rows = block.reshape(T * N, 3)[torch.from_numpy(keys)].clone().requires_grad_(True)
    task = make_task(m)
    task.setup(reader, Scored(rows=shard(keys)), comm=None)
    emb = ShardedEmbeddings(task.shard, rows, lambda k: pytest.fail("nothing to fetch at P = 1"))
    as_block = task._alone_block(emb)
    assert as_block is not None and torch.equal(as_block.block, block) and as_block.position == {t: t for t in range(T)}
    batch = task(emb, epoch=3)
    met = task.metrics(batch.stats)
    loss, pairs, correct, _ = _reference(task, {t: block[t] for t in range(T)}, 3)
    assert float(batch.loss_sum.detach()) == pytest.approx(loss[0], rel=1e-12)
    for s, name in enumerate(("train", "val", "test")):
        assert met[f"{name}_loss"] == pytest.approx(loss[s] / pairs[s], rel=1e-12)
    batch.loss_sum.backward()  # the gradient reaches the rows in the strategy's order
    expected = torch.zeros(T * N, dtype=torch.bool)
    for t in task.ranges[0]:
        expected[t * N : (t + 1) * N] = True
    grad_rows = rows.grad.abs().sum(1) > 0
    assert bool(grad_rows[torch.from_numpy(np.argsort(keys))][~expected].sum() == 0)
    assert int(grad_rows.sum()) > 0
    # rows missing, or several ranks: the in-place path
    partial = make_task(m)
    partial.setup(reader, Scored(rows=shard(keys[: -N // 2])), comm=None)
    assert partial._alone_block(ShardedEmbeddings(partial.shard, rows[: -N // 2], None)) is None
    two = make_task(m)
    two.shard = shard(keys, P=2)
    assert two._alone_block(ShardedEmbeddings(two.shard, rows, None)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("bins", "half_range"), [(AUC_BINS, AUC_RANGE), (1000, 3.0), (1000, 0.1)])
def test_torch_score_stats_equal_numpy_bins(dtype, bins, half_range):
    """The torch AUC pass (GPUs, and the CPU without numba) gives numpy's correct count and histograms exactly,
    at bin edges, outside the range, at 0 and for NaN; also where 2R is no power of two (a divisor that CUDA
    would turn into a product with its reciprocal moves edge values), on the CPU and on a GPU where there is one."""
    logits, positive = auc_test_logits(dtype, bins, half_range)
    want = numpy_score_stats(logits, positive, bins, half_range)
    for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        pos, neg = np.ones(bins), np.ones(bins)  # counts are added to what is there
        correct = score_stats_torch(logits.to(dev), torch.from_numpy(positive).to(dev), bins, half_range, pos, neg)
        assert (correct, list(pos - 1), list(neg - 1)) == want, dev


def test_pairs_by_step_in_destination_buckets_stably_and_alike_on_any_subset():
    """pairs_by_step: step by step, a stable sort of the step's positives then negatives by destination
    bucket (dst - first) // rows, the labels following; the pairs of a subset (a rank's pairs by source) come
    out in the whole set's relative order; one bucket is the positives, then the negatives, of each step; int32
    indices (pair_index_dtype below 2^31 rows) are the same pairs."""
    from hpcdgnn.tasks.link_prediction import bucket_shift, concat_steps, in_buckets, pair_index_dtype, pairs_by_step

    rng = np.random.default_rng(5)
    n, rows = 50, 8
    firsts = [0, 50, 150]

    def step_pairs(m, f):
        return np.sort(rng.integers(0, n, m)) + f, rng.integers(0, n, m) + f

    pos = [step_pairs(m, f) for m, f in zip((40, 0, 77), firsts, strict=True)]
    neg = [step_pairs(m, f) for m, f in zip((30, 9, 0), firsts, strict=True)]
    shift = bucket_shift(rows, n)
    src, dst, label = pairs_by_step(in_buckets(concat_steps(pos), firsts, shift, n), concat_steps(neg), firsts, shift,
                                    n)
    a = 0
    for (ps, pd), (ns, nd), f in zip(pos, neg, firsts, strict=True):
        s, d = np.concatenate([ps, ns]), np.concatenate([pd, nd])
        lab = np.r_[np.ones(ps.shape[0]), np.zeros(ns.shape[0])]
        order = np.argsort((d - f) // rows, kind="stable")
        b = a + s.shape[0]
        np.testing.assert_array_equal(src[a:b], s[order])
        np.testing.assert_array_equal(dst[a:b], d[order])
        np.testing.assert_array_equal(label.numpy()[a:b], lab[order])
        a = b
    assert a == src.shape[0] and label.dtype == torch.float32

    def keep(pairs):
        return [(s[s % 3 == 0], d[s % 3 == 0]) for s, d in pairs]

    kept = in_buckets(concat_steps(keep(pos)), firsts, shift, n)
    sub = pairs_by_step(kept, concat_steps(keep(neg)), firsts, shift, n)
    mine = src % 3 == 0
    for x, y in zip(sub, (src[mine], dst[mine], label[mine]), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    one = pairs_by_step(concat_steps(pos), concat_steps(neg), firsts, bucket_shift(n, n), n)
    plain = [np.concatenate([a for p, q in zip(pos, neg, strict=True) for a in (p[i], q[i])]) for i in (0, 1)]
    np.testing.assert_array_equal(one[0], plain[0])
    np.testing.assert_array_equal(one[1], plain[1])
    assert src.dtype == one[0].dtype == np.int64  # the default
    assert pair_index_dtype(2**31) == np.int32 and pair_index_dtype(2**31 + 1) == np.int64
    for shift_k, want in ((shift, (src, dst, label)), (bucket_shift(n, n), one)):
        narrow = pairs_by_step(in_buckets(concat_steps(pos), firsts, shift_k, n), concat_steps(neg), firsts, shift_k, n,
                               np.dtype(np.int32))
        assert narrow[0].dtype == narrow[1].dtype == np.int32
        for x, y in zip(narrow, want, strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_buckets_by_default_only_where_the_decoder_runs_on_the_cpu(task_data, monkeypatch):
    """Unset, HPCDGNN_BUCKET_BYTES is BUCKET_BYTES for a decoder on the CPU and no buckets (one bucket of every
    row) for a decoder elsewhere (a ``meta`` decoder stands for a GPU's): the order serves a CPU core's cache,
    and on a GPU building it was host time. Set, the variable wins on either device."""
    from hpcdgnn.tasks.link_prediction import BUCKET_BYTES, bucket_shift

    _, m, _ = task_data
    monkeypatch.delenv("HPCDGNN_BUCKET_BYTES", raising=False)
    task = make_task(m)
    row = 2 * task.cfg.decoder_hidden * task.decoder.lin1.weight.element_size()
    rows = 1 << 20  # more vertices than one default bucket covers
    assert task._bucket_shift(rows) == bucket_shift(BUCKET_BYTES // row, rows) < bucket_shift(rows, rows)
    task.decoder.to("meta")
    assert task._bucket_shift(rows) == bucket_shift(rows, rows)
    monkeypatch.setenv("HPCDGNN_BUCKET_BYTES", "1024")
    for device in ("meta", "cpu"):
        task = make_task(m)
        task.decoder.to_empty(device=device)
        assert task._bucket_shift(rows) == bucket_shift(1024 // row, rows)


def test_destination_buckets_change_the_loss_by_rounding_only(task_data, monkeypatch):
    """HPCDGNN_BUCKET_BYTES small enough for several buckets on this graph against 0 (no buckets): the same
    metric histograms and counts, the loss and gradients to rounding; a bad value is a one-line error."""
    from hpcdgnn.errors import ConfigError

    _, m, reader = task_data
    runs = {}
    for value in ("0", "512"):  # 512 bytes: 2 rows of (pv, dpv) at hidden 16, float64
        monkeypatch.setenv("HPCDGNN_BUCKET_BYTES", value)
        task = make_task(m)
        task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm=None)
        emb = _emb(seed=5)
        batch = task(emb, epoch=2)
        batch.loss_sum.backward()
        runs[value] = (batch, [emb[t].grad for t in task.ranges[0]], task._pairs(list(task.ranges[0]),
                                                                                  {t: t for t in range(T)}, N, 2))
    (a, ga, pa), (b, gb, pb) = runs["0"], runs["512"]
    assert pa[0].dtype == pa[1].dtype == torch.int32  # pair_index_dtype: the stacked rows fit int32
    assert not np.array_equal(pa[1].numpy(), pb[1].numpy())  # the order did change
    np.testing.assert_array_equal(np.sort(pa[1].numpy()), np.sort(pb[1].numpy()))
    width = 3 + 2 * AUC_BINS
    for s in range(3):
        assert np.array_equal(a.stats[s * width + 1 : (s + 1) * width], b.stats[s * width + 1 : (s + 1) * width])
    assert float(a.loss_sum.detach()) == pytest.approx(float(b.loss_sum.detach()), rel=1e-12)
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)
    monkeypatch.setenv("HPCDGNN_BUCKET_BYTES", "half")
    with pytest.raises(ConfigError, match="HPCDGNN_BUCKET_BYTES='half'"):
        make_task(m)


_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("n", [1, 300, 100_000, (1 << 32) - 1])
def test_negatives_drawn_on_a_device_are_the_hosts_bit_for_bit(n, device):
    """:func:`draw_negatives_on` (torch int64 splitmix64, what a GPU runs) gives the host's pairs exactly, for
    empty steps, one vertex and N near 2^32 (where the 64-bit products wrap); on a GPU where there is one."""
    from hpcdgnn.ops.negatives import draw_negatives_joined, draw_negatives_on

    steps, counts = [4, 0, 9, 2, 7], [50, 0, 3000, 1, 400]
    offsets = [0, 10, 20, 5, 1 << 33]
    want, bounds = draw_negatives_joined(5, 3, steps, n, counts, offsets)
    src, dst, got_bounds = draw_negatives_on(5, 3, steps, n, counts, offsets, torch.device(device))
    np.testing.assert_array_equal(got_bounds, bounds)
    assert src.dtype == dst.dtype == torch.int64 and src.device.type == device
    np.testing.assert_array_equal(src.cpu().numpy(), want[0])
    np.testing.assert_array_equal(dst.cpu().numpy(), want[1])
    empty = draw_negatives_on(5, 3, [1], n, [0], [0], torch.device(device))
    assert empty[0].shape == empty[1].shape == (0,)


@pytest.mark.parametrize("device", _DEVICES)
def test_pairs_built_on_the_decoders_device_are_the_hosts_without_buckets(task_data, monkeypatch, device):
    """A decoder off the CPU gets every step's (src, dst, label) built where it runs (``_pairs_on``): the same
    pairs, order and index dtype as the host's unbucketed ones, for the training steps and for a split whose rows
    start mid-block; positives cached there, negatives new each epoch."""
    from hpcdgnn.tasks.link_prediction import pairs_by_step, pairs_by_step_on

    _, m, reader = task_data
    monkeypatch.setenv("HPCDGNN_BUCKET_BYTES", "0")
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm=None)
    device = torch.device(device)  # on the CPU: the GPU path's arithmetic, run here
    for steps, where in ((list(task.ranges[0]), {t: t for t in range(T)}), ([4, 5], {4: 1, 5: 0})):
        for epoch in (0, 3):
            host = task._pairs(steps, where, N, epoch)
            got = task._pairs_on(steps, [where[t] * N for t in steps], N, epoch, device)
            for a, b in zip(host, got, strict=True):
                assert a.dtype == b.dtype and torch.equal(a, b.cpu()), (steps, epoch)
    assert not torch.equal(task._pairs_on([0], [0], N, 0, device)[1], task._pairs_on([0], [0], N, 1, device)[1])
    # the interleaving alone, on uneven runs with an empty one
    pos = (np.arange(5), np.arange(5) + 100, np.array([0, 2, 2, 5]))
    neg = (np.arange(4) + 10, np.arange(4) + 110, np.array([0, 1, 3, 4]))
    want = pairs_by_step(pos, neg, [0, 0, 0], 1, 1)
    got = pairs_by_step_on(tuple(torch.from_numpy(x) if i < 2 else x for i, x in enumerate(pos)),
                           tuple(torch.from_numpy(x) if i < 2 else x for i, x in enumerate(neg)))
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a if isinstance(a, np.ndarray) else a.numpy(), b.numpy())
