"""Tests for virtbench.stats against independently known values.

Expected numbers are computed by hand in the comments (or enumerated exactly),
never by calling the function under test or the scipy routine it wraps.
"""

import math
import time

import numpy as np
import pytest

from virtbench.stats import (
    Ratio,
    Summary,
    geomean_index_ci,
    geometric_mean,
    overhead,
    ratio,
    relative_ci_halfwidth,
    summarize,
    warnings_for,
)

nan = float("nan")


# --------------------------------------------------------------------------- summarize


def test_summary_even_list_hand_computed():
    # x = [2, 4, 4, 4, 5, 5, 7, 9]: sum 40 -> mean 5; median (4 + 5) / 2 = 4.5
    # squared deviations 9+1+1+1+0+0+4+16 = 32 -> sample variance 32/7
    # |x - 4.5| = 2.5, .5, .5, .5, .5, .5, 2.5, 4.5 -> MAD 0.5, scaled 0.7413
    # robust z: 9 -> 4.5/0.7413 = 6.07 (> 3.5, outlier); 2 and 7 -> 3.37 (not)
    s = summarize([2, 4, 4, 4, 5, 5, 7, 9])
    assert s.n == 8
    assert s.median == 4.5
    assert s.mean == 5.0
    assert s.stdev == pytest.approx(math.sqrt(32 / 7))
    assert s.cv == pytest.approx(math.sqrt(32 / 7) / 5)
    assert s.outliers == 1
    assert (s.min, s.max) == (2.0, 9.0)
    assert s.ci_low <= s.median <= s.ci_high
    # The bootstrap median of resamples can only land on data points or midpoints of two.
    assert 2.0 <= s.ci_low and s.ci_high <= 9.0


def test_summary_odd_list_hand_computed():
    # [1, 2, 3, 4, 100]: median 3, mean 110/5 = 22
    # deviations from mean: -21 -20 -19 -18 78 -> squares 441+400+361+324+6084 = 7610
    # sample variance 7610/4 = 1902.5; MAD = median(2,1,0,1,97) = 1 -> only 100 is an outlier
    s = summarize([4, 100, 1, 3, 2])
    assert (s.n, s.median, s.mean) == (5, 3.0, 22.0)
    assert s.stdev == pytest.approx(math.sqrt(1902.5))
    assert s.outliers == 1


def test_ci_contains_median_and_narrows_with_n():
    rng = np.random.default_rng(7)
    small = summarize(rng.normal(100, 5, 10))
    large = summarize(rng.normal(100, 5, 400))
    for s in (small, large):
        assert s.ci_low <= s.median <= s.ci_high
    # width shrinks roughly like 1/sqrt(n): 40x the data -> about 1/6 the width
    assert (large.ci_high - large.ci_low) < (small.ci_high - small.ci_low) / 2
    # (whether a single CI covers the true median is a 95 % event; coverage is
    # checked over many data sets in the next test)


def test_ci_coverage_of_true_median_is_near_nominal():
    hits = 0
    trials = 200
    for i in range(trials):
        x = np.random.default_rng(5000 + i).normal(100, 5, 20)
        s = summarize(x, seed=i, resamples=1000)
        hits += s.ci_low <= 100 <= s.ci_high
    assert 0.88 <= hits / trials <= 0.995


def test_confidence_level_widens_interval():
    x = np.random.default_rng(3).normal(50, 2, 25)
    s90 = summarize(x, confidence=0.90)
    s99 = summarize(x, confidence=0.99)
    assert s99.ci_low <= s90.ci_low and s90.ci_high <= s99.ci_high


def test_deterministic_with_same_seed():
    x = np.random.default_rng(11).normal(10, 1, 15)
    assert summarize(x, seed=5) == summarize(x, seed=5)
    # the median's CI is exact (order statistics): no random draw, so no seed dependence
    assert summarize(x, seed=5) == summarize(x, seed=6)
    assert ratio(x, x + 1, seed=3) == ratio(x, x + 1, seed=3)


def test_accepts_list_tuple_array_and_generator():
    ref = summarize([1.0, 2.0, 3.0])
    assert summarize((1, 2, 3)) == ref
    assert summarize(np.array([1, 2, 3])) == ref
    assert summarize(v for v in (1, 2, 3)) == ref


def test_nan_values_are_dropped():
    s = summarize([1.0, nan, 3.0, nan])
    assert s.n == 2
    assert s.median == 2.0 and s.mean == 2.0
    assert s.stdev == pytest.approx(math.sqrt(2))
    assert s == summarize([1.0, 3.0])


def test_infinite_values_are_kept_without_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = summarize([1.0, math.inf, 3.0])
        r = ratio([1.0, 2.0, math.inf], [1.0, 2.0, 3.0])
    assert s.n == 3 and s.median == 3.0 and s.mean == math.inf
    assert not math.isfinite(s.stdev)
    assert r.ratio == 1.0


def test_empty_input_gives_nan_summary():
    s = summarize([])
    assert s.n == 0 and s.outliers == 0
    for f in ("median", "mean", "stdev", "ci_low", "ci_high", "cv", "min", "max"):
        assert math.isnan(getattr(s, f)), f
    assert summarize([nan, nan]).n == 0


def test_single_value():
    s = summarize([42.0])
    assert (s.n, s.median, s.mean, s.min, s.max, s.outliers) == (1, 42.0, 42.0, 42.0, 42.0, 0)
    assert math.isnan(s.stdev) and math.isnan(s.cv)
    assert math.isnan(s.ci_low) and math.isnan(s.ci_high)


def test_all_identical_values():
    s = summarize([7.0] * 10)
    assert s.median == s.mean == 7.0
    assert s.stdev == 0.0 and s.cv == 0.0
    assert s.ci_low == s.ci_high == 7.0
    assert s.outliers == 0  # MAD is 0


def test_zero_mean_gives_nan_cv():
    s = summarize([-1.0, 1.0])
    assert s.mean == 0.0 and math.isnan(s.cv)


def test_outlier_detection_finds_injected_outlier():
    x = list(np.random.default_rng(2).normal(100, 1, 30))
    assert summarize(x).outliers == 0
    s = summarize(x + [130.0])
    assert s.outliers == 1
    assert summarize(x + [130.0, 60.0]).outliers == 2


def test_invalid_parameters_raise():
    with pytest.raises(ValueError, match="confidence"):
        summarize([1, 2, 3], confidence=1.5)
    with pytest.raises(ValueError, match="resamples"):
        summarize([1, 2, 3], resamples=0)
    with pytest.raises(ValueError, match="alpha"):
        ratio([1, 2], [3, 4], alpha=0)


def test_summarize_n30_is_fast():
    x = np.random.default_rng(0).normal(100, 2, 30)
    summarize(x)  # warm up
    best = math.inf
    for _ in range(5):
        t = time.perf_counter()
        summarize(x, resamples=2000)
        best = min(best, time.perf_counter() - t)
    assert best < 0.010


# --------------------------------------------------------------------------- relative CI half-width


def test_relative_ci_halfwidth():
    x = np.random.default_rng(4).normal(200, 4, 20)
    s = summarize(x)
    assert relative_ci_halfwidth(x) == pytest.approx((s.ci_high - s.ci_low) / 2 / s.median)
    assert 0 < relative_ci_halfwidth(x) < 0.05
    assert relative_ci_halfwidth([5.0] * 6) == 0.0
    # 4 values cannot give a 95 % interval of the median ([min, max] is 87.5 %): keep repeating
    assert relative_ci_halfwidth([5.0] * 4) == math.inf
    assert relative_ci_halfwidth([]) == math.inf
    assert relative_ci_halfwidth([3.0]) == math.inf
    assert relative_ci_halfwidth([-1.0, 0.0, 1.0]) == math.inf  # median 0


# --------------------------------------------------------------------------- Mann-Whitney U via ratio()


def test_mann_whitney_exact_complete_separation_3_vs_3():
    # Exact null distribution: C(6,3) = 20 equally likely rank sets for the
    # first group. Complete separation (U = 0) is 1 of them, so the one-sided
    # p = 1/20 and the two-sided p = 2/20 = 0.1.
    r = ratio([1, 2, 3], [4, 5, 6])
    assert r.p_value == pytest.approx(0.1)
    assert not r.significant


def test_mann_whitney_exact_interleaved_3_vs_3():
    # x = [1, 3, 5], y = [2, 4, 6]: pairs with x > y are (3,2), (5,2), (5,4) -> U = 3.
    # Frequencies of U = 0..9 over the 20 rank sets: 1 1 2 3 3 3 3 2 1 1,
    # so P(U <= 3) = (1+1+2+3)/20 = 7/20 and the two-sided p = 14/20 = 0.7.
    r = ratio([1, 3, 5], [2, 4, 6])
    assert r.p_value == pytest.approx(0.7)


def test_mann_whitney_matches_published_critical_value_n8():
    # Published tables of critical values of U (e.g. the Mann-Whitney table in
    # Siegel & Castellan, "Nonparametric Statistics", or any intro statistics
    # text): for n1 = n2 = 8, two-sided alpha = 0.05, reject when U <= 13.
    # Exact values by enumeration of C(16,8) = 12870 rank sets:
    # 2 * P(U <= 13) = 642/12870 = 0.049883..., 2 * P(U <= 14) = 836/12870 = 0.064957...
    y = [10, 20, 30, 40, 50, 60, 70, 80]
    u13 = [1, 2, 3, 4, 5, 6, 55, 85]  # 55 beats 5 of y, 85 beats all 8 -> U = 13
    u14 = [1, 2, 3, 4, 5, 6, 65, 85]  # 65 beats 6 -> U = 14
    r13 = ratio(u13, y)
    r14 = ratio(u14, y)
    assert r13.p_value == pytest.approx(642 / 12870)
    assert r14.p_value == pytest.approx(836 / 12870)
    assert r13.significant and not r14.significant


def _enumerate_two_sided_p(u: int, n1: int, n2: int) -> float:
    """Exact two-sided Mann-Whitney p by brute-force enumeration (independent of scipy)."""
    from itertools import combinations

    counts = {}
    offset = n1 * (n1 + 1) // 2
    for ranks in combinations(range(1, n1 + n2 + 1), n1):
        k = sum(ranks) - offset
        counts[k] = counts.get(k, 0) + 1
    total = math.comb(n1 + n2, n1)
    lower = sum(v for k, v in counts.items() if k <= u) / total
    upper = sum(v for k, v in counts.items() if k >= u) / total
    return min(1.0, 2 * min(lower, upper))


def test_enumeration_helper_agrees_with_hand_values():
    assert _enumerate_two_sided_p(13, 8, 8) == pytest.approx(642 / 12870)
    assert _enumerate_two_sided_p(3, 3, 3) == pytest.approx(0.7)


def test_mann_whitney_asymptotic_with_ties_hand_computed():
    # n1 = n2 = 10 with ties -> scipy 'auto' uses the normal approximation with
    # tie correction and continuity correction. By hand:
    # pooled ranks: 1->1, 2,2->2.5, 3,3->4.5, 4,4,4->7, 5,5,5->10, 6,6,6->13,
    #               7,7->15.5, 8,8->17.5, 9->19, 10->20
    # R_x = 4.5 + 7 + 7 + 10 + 13 + 13 + 15.5 + 17.5 + 19 + 20 = 126.5
    # U_x = 126.5 - 10*11/2 = 71.5; mu = 10*10/2 = 50
    # ties: four pairs (t=2: 6 each) and three triples (t=3: 24 each): sum(t^3 - t) = 96
    # var = n1 n2 / 12 * ((N + 1) - 96 / (N (N - 1))) = 100/12 * (21 - 96/380)
    # z = (71.5 - 50 - 0.5) / sqrt(var) = 1.5971; p = erfc(z / sqrt 2) = 0.1102
    x = [3, 4, 4, 5, 6, 6, 7, 8, 9, 10]
    y = [1, 2, 2, 3, 4, 5, 5, 6, 7, 8]
    var = 100 / 12 * (21 - 96 / 380)
    z = (71.5 - 50 - 0.5) / math.sqrt(var)
    expected = math.erfc(z / math.sqrt(2))
    assert expected == pytest.approx(0.1102, abs=1e-4)
    r = ratio(x, y)
    assert r.p_value == pytest.approx(expected, rel=1e-9)
    assert not r.significant


def test_equal_groups_not_significant():
    a = [10.1, 9.8, 10.3, 10.0, 9.9, 10.2, 10.05, 9.95]
    r = ratio(a, list(a))
    assert r.p_value == pytest.approx(1.0)
    assert not r.significant
    assert r.ratio == 1.0


def test_separated_groups_n8_significant():
    base = [100, 101, 102, 103, 104, 105, 106, 107]
    cand = [90, 91, 92, 93, 94, 95, 96, 97]
    r = ratio(cand, base)
    # complete separation of 8 vs 8: exact two-sided p = 2 / C(16, 8) = 2/12870
    assert r.p_value == pytest.approx(2 / 12870)
    assert r.significant
    assert r.ratio == pytest.approx(93.5 / 103.5)


def test_all_identical_values_give_nan_p():
    r = ratio([5.0] * 6, [5.0] * 6)
    assert math.isnan(r.p_value) and not r.significant
    assert r.ratio == 1.0 and r.ci_low == r.ci_high == 1.0


# --------------------------------------------------------------------------- ratio


def test_ratio_of_medians_is_raw_and_direction_independent():
    # medians 30 and 20 -> 1.5 whatever the direction
    for hib in (True, False):
        r = ratio([10, 30, 50], [19, 20, 21], higher_is_better=hib)
        assert r.ratio == 1.5


def test_ratio_ci_covers_true_ratio_synthetic():
    rng = np.random.default_rng(42)
    baseline = rng.normal(100, 1, 20)
    candidate = rng.normal(90, 1, 20)
    r = ratio(candidate, baseline)
    assert r.ci_low < 0.9 < r.ci_high
    assert r.ci_high < 1.0
    assert r.ci_low <= r.ratio <= r.ci_high
    assert r.significant


def test_ratio_ci_coverage_over_many_datasets():
    hits = 0
    trials = 150
    for i in range(trials):
        rng = np.random.default_rng(1000 + i)
        b = rng.normal(100, 1, 20)
        c = rng.normal(90, 1, 20)
        r = ratio(c, b, seed=i, resamples=1000)
        hits += r.ci_low <= 0.9 <= r.ci_high
        assert r.ci_high < 1.0
    assert hits / trials >= 0.88


def test_ratio_small_groups():
    r = ratio([10.0], [5.0, 5.0, 5.0])
    assert r.ratio == 2.0
    assert math.isnan(r.ci_low) and math.isnan(r.ci_high)
    assert math.isnan(r.p_value) and not r.significant
    r = ratio([], [1.0, 2.0])
    assert math.isnan(r.ratio) and math.isnan(r.p_value)


def test_zero_baseline_median_no_crash():
    r = ratio([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert math.isnan(r.ratio)
    assert math.isnan(r.ci_low) and math.isnan(r.ci_high)
    # The rank test is still defined. By hand: the three zeros share ranks 1-3
    # (2 each), x takes 4, 5, 6 -> R_x = 15, U = 15 - 6 = 9, mu = 4.5; one tie
    # group of 3 -> sum(t^3 - t) = 24; var = 9/12 * (7 - 24/30) = 4.65;
    # z = (9 - 4.5 - 0.5) / sqrt(4.65) -> p = erfc(z / sqrt 2) = 0.0636
    expected = math.erfc((9 - 4.5 - 0.5) / math.sqrt(4.65) / math.sqrt(2))
    assert r.p_value == pytest.approx(expected, rel=1e-9)
    r = ratio([1.0, 2.0, 3.0], [0.0, 0.0, 5.0])  # median 0, one resample median can be 5
    assert math.isnan(r.ratio) and math.isnan(r.ci_low)


def test_ratio_nan_values_dropped():
    assert ratio([2.0, nan, 4.0], [1.0, 1.0, nan]) == ratio([2.0, 4.0], [1.0, 1.0])


# --------------------------------------------------------------------------- overhead


def test_overhead_sign():
    slower_time = Ratio(1.2, 1.1, 1.3, 0.01, True)
    assert overhead(slower_time, higher_is_better=False) == pytest.approx(0.2)
    lower_throughput = Ratio(0.9, 0.85, 0.95, 0.01, True)
    assert overhead(lower_throughput, higher_is_better=True) == pytest.approx(0.1)
    # a faster candidate has negative overhead in both directions
    assert overhead(Ratio(0.8, 0.7, 0.9, 0.01, True), higher_is_better=False) == pytest.approx(-0.2)
    assert overhead(Ratio(1.1, 1.0, 1.2, 0.01, True), higher_is_better=True) == pytest.approx(-0.1)
    assert math.isnan(overhead(Ratio(nan, nan, nan, nan, False), True))


def test_overhead_from_ratio():
    r = ratio([90, 90, 90], [100, 100, 100])
    assert overhead(r, True) == pytest.approx(0.1)
    assert overhead(r, False) == pytest.approx(-0.1)


# --------------------------------------------------------------------------- geometric mean and index


def test_geometric_mean():
    assert geometric_mean([1, 10, 100]) == pytest.approx(10.0)
    assert geometric_mean([2, 8]) == pytest.approx(4.0)
    assert geometric_mean([3.0]) == pytest.approx(3.0)
    assert geometric_mean(np.array([4.0, 9.0])) == pytest.approx(6.0)


@pytest.mark.parametrize("bad", [[1, 0, 2], [1, -3], [1, nan], []])
def test_geometric_mean_rejects_non_positive(bad):
    with pytest.raises(ValueError, match="geometric mean"):
        geometric_mean(bad)


def test_geomean_index_constant_samples_collapse_to_hand_value():
    # scores: 50/100*10 = 5 and 200/50*10 = 40 -> sqrt(5 * 40) = sqrt(200) = 14.1421...
    idx, lo, hi = geomean_index_ci([[50.0, 50.0, 50.0], [200.0, 200.0]], [100.0, 50.0])
    assert idx == pytest.approx(math.sqrt(200), rel=1e-12)
    assert lo == pytest.approx(idx, rel=1e-12)
    assert hi == pytest.approx(idx, rel=1e-12)


def test_geomean_index_equals_baseline_scores_10():
    idx, lo, hi = geomean_index_ci([[3.0, 3.0], [7.0, 7.0], [11.0, 11.0]], [3.0, 7.0, 11.0])
    assert idx == pytest.approx(10.0)


def test_geomean_index_ci_brackets_index_and_is_deterministic():
    rng = np.random.default_rng(9)
    tests = [list(rng.normal(m, m * 0.03, 12)) for m in (50, 200, 1000)]
    base = [40.0, 250.0, 1000.0]
    idx, lo, hi = geomean_index_ci(tests, base, seed=1)
    medians = [float(np.median(t)) for t in tests]
    expected = (medians[0] / 40 * 10 * medians[1] / 250 * 10 * medians[2] / 1000 * 10) ** (1 / 3)
    assert idx == pytest.approx(expected)
    assert lo < idx < hi
    assert (hi - lo) / idx < 0.1
    assert geomean_index_ci(tests, base, seed=1) == (idx, lo, hi)


def test_geomean_index_single_sample_test_gives_nan_ci():
    idx, lo, hi = geomean_index_ci([[10.0], [20.0, 22.0]], [10.0, 21.0])
    assert idx == pytest.approx(10.0)  # scores 10 and 10
    assert math.isnan(lo) and math.isnan(hi)


def test_geomean_index_bad_input():
    with pytest.raises(ValueError, match="baselines"):
        geomean_index_ci([[1.0, 2.0]], [1.0, 2.0])
    with pytest.raises(ValueError, match="no tests"):
        geomean_index_ci([], [])
    with pytest.raises(ValueError, match="positive"):
        geomean_index_ci([[1.0, 2.0]], [0.0])
    with pytest.raises(ValueError, match="no samples"):
        geomean_index_ci([[]], [1.0])
    with pytest.raises(ValueError, match="geometric mean"):
        geomean_index_ci([[-1.0, -2.0]], [1.0])


# --------------------------------------------------------------------------- warnings


def _summary(**kw):
    base = dict(n=10, median=100.0, mean=100.0, stdev=1.0, ci_low=99.0, ci_high=101.0,
                cv=0.01, outliers=0, min=98.0, max=102.0)
    base.update(kw)
    return Summary(**base)


def test_warnings_noisy_message():
    w = warnings_for(_summary(cv=0.123))
    assert w == [
        "noisy: coefficient of variation 12.3% (> 5%); "
        "close other programs, pin CPU frequency, or add repetitions"
    ]
    assert warnings_for(_summary(cv=0.04)) == []
    assert warnings_for(_summary(cv=0.04), cv_limit=0.02)[0].startswith(
        "noisy: coefficient of variation 4.0% (> 2%)"
    )


def test_warnings_single_sample_and_outliers():
    assert warnings_for(summarize([3.0])) == [
        "only 1 sample: no confidence interval; run at least 6 repetitions (a 95 % interval needs that many)"
    ]
    assert warnings_for(_summary(outliers=2)) == [
        "2 outlier(s) by median/MAD; look for interference during the run"
    ]
    assert any(m.startswith("no samples") for m in warnings_for(summarize([])))
    assert any(m.startswith("only 2 samples") for m in warnings_for(summarize([1.0, 1.0])))
    # the advice is the number the method needs: 3 values reach 75 %, 6 reach 96.9 %
    (three,) = warnings_for(summarize([1.0, 1.0, 1.0]))
    assert three == ("only 3 samples: the median's interval [min, max] reaches 75.0%, not 95 %; "
                     "run at least 6 repetitions")
    assert warnings_for(summarize([1.0] * 6)) == []


def test_warnings_from_real_data():
    clean = np.random.default_rng(0).normal(100, 1, 20)
    assert warnings_for(summarize(clean)) == []
    noisy = np.random.default_rng(0).normal(100, 20, 20)
    assert any(m.startswith("noisy:") for m in warnings_for(summarize(noisy)))
    spiky = list(clean) + [200.0]
    assert any("1 outlier(s)" in m for m in warnings_for(summarize(spiky)))


def test_r2_range_is_the_exact_range_over_the_box():
    """stats.linearity.r2_range against scipy's R^2: a point box gives the point's R^2; on random boxes
    no corner or inside point falls outside the range, and sampled points come within 0.05 of both ends."""
    import itertools

    from scipy import stats as sps

    from virtbench.stats.linearity import r2_range

    xs = [1.0, 2.0, 4.0, 8.0]
    point = [10.0, 100.0, 105.0, 300.0]
    lo, hi = r2_range(xs, point, point)
    assert lo == pytest.approx(sps.linregress(xs, point).rvalue ** 2, abs=2e-6) and hi - lo < 4e-6
    rng = np.random.default_rng(3)
    for _ in range(6):
        low = rng.uniform(0.0, 10.0, 4)
        high = low + rng.uniform(0.0, 3.0, 4)
        lo, hi = r2_range(xs, low, high)
        inside = [rng.uniform(low, high) for _ in range(400)]
        corners = [np.where(np.array(c), high, low) for c in itertools.product((0, 1), repeat=4)]
        r2 = [sps.linregress(xs, m).rvalue ** 2 for m in inside + corners]
        assert lo <= min(r2) + 1e-6 and max(r2) <= hi + 1e-6, (lo, hi, min(r2), max(r2))
        assert min(r2) - lo < 0.05 and hi - max(r2) < 0.05  # sampled points come close to both ends
    with pytest.raises(ValueError, match="at least 3 distinct"):
        r2_range([1.0, 2.0], [1.0, 2.0], [1.0, 2.0])
