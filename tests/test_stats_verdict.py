"""The four verdicts read from one interval (issue 32): data on each side of each boundary."""

import math

import pytest

from virtbench.stats.interval_verdict import DEFAULT_MARGIN, EQUIVALENT, FASTER, INCONCLUSIVE, SLOWER, interval_verdict

EDGE = 1.0 + DEFAULT_MARGIN  # 1.02: the margin's upper bound; its lower one is 1 / 1.02


def _v(low, high, **kw):
    kw.setdefault("level", 0.95)
    return interval_verdict(low, high, **kw)


@pytest.mark.parametrize("low, high, verdict", [
    (0.99, 1.01, EQUIVALENT),                      # inside, around 1
    (1 / EDGE, EDGE, EQUIVALENT),                  # exactly on both bounds
    (1 / EDGE - 1e-4, 1.01, INCONCLUSIVE),         # just below the lower bound, includes 1
    (0.99, EDGE + 1e-4, INCONCLUSIVE),             # just above the upper bound, includes 1
    (0.9802, 1.01, INCONCLUSIVE),                  # above 1 - 0.02 but below 1/1.02: log-symmetric margin
    (1.005, 1.015, EQUIVALENT),                    # excludes 1 but inside the margin: equivalent first
    (1.005, EDGE + 1e-4, FASTER),                  # excludes 1, leaves the margin: a difference that may matter
    (1.0 + 1e-9, 1.2, FASTER),                     # just above 1
    (1.0, 1.2, INCONCLUSIVE),                      # touches 1: does not exclude it
    (0.8, 1.0, INCONCLUSIVE),
    (0.8, 1.0 - 1e-9, SLOWER),                     # just below 1, throughput: slower
])
def test_each_side_of_each_boundary(low, high, verdict):
    assert _v(low, high).verdict == verdict


def test_direction_follows_the_metric():
    assert _v(1.05, 1.10, higher_is_better=True).verdict == FASTER    # throughput up
    assert _v(1.05, 1.10, higher_is_better=False).verdict == SLOWER   # time up
    assert _v(0.90, 0.95, higher_is_better=True).verdict == SLOWER
    assert _v(0.90, 0.95, higher_is_better=False).verdict == FASTER


def test_detectable_is_the_largest_change_the_interval_leaves_open():
    r = _v(0.95, 1.09)
    assert r.verdict == INCONCLUSIVE and r.detectable == pytest.approx(0.09)
    r = _v(0.90, 1.03)
    assert r.detectable == pytest.approx(1 / 0.9 - 1)  # 11.1 %: 10 % faster is 11.1 % slower the other way
    assert _v(0.99, 1.015).detectable == pytest.approx(0.015)
    assert r.margin == DEFAULT_MARGIN and r.level == 0.95 and r.reason == ""


def test_margin_is_the_users():
    assert _v(0.96, 1.04).verdict == INCONCLUSIVE
    assert _v(0.96, 1.04, margin=0.05).verdict == EQUIVALENT
    assert _v(0.96, 1.04, margin=0.04).verdict == INCONCLUSIVE  # 1/0.96 - 1 = 4.17 % > 4 %
    assert _v(0.962, 1.04, margin=0.04).verdict == EQUIVALENT   # 1/0.962 - 1 = 3.95 %
    with pytest.raises(ValueError, match="positive fraction"):
        _v(0.99, 1.01, margin=0)
    with pytest.raises(ValueError, match="positive fraction"):
        _v(0.99, 1.01, margin=math.nan)


def test_an_interval_below_the_needed_level_is_n_too_small():
    # 2 vs 2 values give 66.7 % at most: no verdict at 95 %, however narrow or far from 1
    for low, high in [(0.999, 1.001), (1.5, 1.6)]:
        r = _v(low, high, level=0.667, needed=0.95)
        assert (r.verdict, r.detectable, r.reason, r.level) == (INCONCLUSIVE, None, "n too small", 0.667)
    # a table's corrected level: 0.99 reached, 0.9917 needed
    assert _v(1.5, 1.6, level=0.99, needed=1 - 0.05 / 6).reason == "n too small"
    assert _v(1.5, 1.6, level=1 - 0.05 / 6, needed=1 - 0.05 / 6).verdict == FASTER


@pytest.mark.parametrize("low, high", [(math.nan, math.nan), (math.nan, 1.1), (0.0, 1.1), (-0.1, 1.1), (1.1, 1.0)])
def test_no_interval_is_inconclusive_without_a_figure(low, high):
    r = _v(low, high)
    assert (r.verdict, r.detectable, r.reason) == (INCONCLUSIVE, None, "no interval")


def test_equivalence_at_the_margin_is_claimed_at_most_at_half_the_error_rate():
    """A true ratio exactly on the margin (1.02) must rarely be called equivalent: reading the 95 %
    interval, the two one-sided tests run at 2.5 % each, so at most ~2.5 % of runs; a true ratio of 1
    with the same noise is called equivalent most of the time (the rule has power), and one at 1.10
    is never called equivalent and almost always slower (a time) or faster."""
    import numpy as np

    from virtbench import stats

    rng = np.random.default_rng(32)

    def rate(true, verdict, sims=400):
        hits = 0
        for _ in range(sims):
            base = np.exp(rng.normal(0, 0.01, 20))
            cand = true * base * np.exp(rng.normal(0, 0.01, 20))
            r = stats.paired_ratio(cand, base)
            hits += interval_verdict(r.ci_low, r.ci_high, level=r.ci_level).verdict == verdict
        return hits / sims

    assert rate(1.02, EQUIVALENT) <= 0.04
    assert rate(1 / 1.02, EQUIVALENT) <= 0.04
    assert rate(1.0, EQUIVALENT) >= 0.8
    assert rate(1.10, FASTER) >= 0.95
