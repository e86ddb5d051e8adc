"""Analysis statistics: summaries, ratios to a baseline, significance, indexes, noise warnings.

Pure functions: no I/O, no global state. Every random draw comes from
``numpy.random.default_rng(seed)``, so the same input and seed give the same
result on every call.

Conventions shared by all functions here:

* Input values may be any iterable of numbers (list, tuple, numpy array).
  NaN values are **dropped** before anything is computed (a failed repetition
  recorded as NaN does not poison a summary); ``n`` counts the values kept.
  Infinite values are kept: they show up as inf/NaN in mean, stdev and CI
  (never as a warning or exception), so a broken parser stays visible.
* Too little data never raises: an empty input gives ``n == 0`` and NaN
  fields, one value gives NaN spread and NaN confidence interval.
* Confidence intervals hold their stated level (issue 14; coverage measured
  by tests/test_coverage.py and bench/ci_coverage.py):

  - a median's CI is the distribution-free order-statistic interval
    ``[x_(j), x_(n+1-j)]`` with the binomial level ``1 - 2 P(B <= j-1)``,
    ``B ~ Bin(n, 1/2)``; below n = 6 even ``[min, max]`` is under 95 %
    (n=3: 75 %, n=4: 87.5 %, n=5: 93.75 %) and ``ci_level`` says so;
  - a ratio from paired rounds (each environment run once per round, beside
    the baseline) inverts the exact Wilcoxon signed-rank test on the rounds'
    log ratios: the Hodges-Lehmann interval of the Walsh averages, exact
    when the per-round log ratios are symmetric about the true one (noise
    alike on both sides, load that hits whole rounds, bursts that hit either
    side at random); load common to a round cancels in its own ratio
    (issue 24; :func:`paired_ratio`);
  - a ratio from unpaired groups (runs stored before rounds were recorded,
    two runs compared) inverts the exact Mann-Whitney test on log values: the
    Hodges-Lehmann interval of the log shift between the two groups, exact
    when one group's distribution is the other's times a factor (a platform
    that scales every result alike);
  - both exclude 1 exactly when the exact two-sided p-value is at most
    ``1 - level``, so a verdict read from the interval and one read from the
    test agree;
  - the bootstrap (percentile method) remains only for the geometric-mean
    indexes and for very large groups, where it is known to behave.
* Bootstrap resamples: one set per group of values, memoized (:mod:`virtbench.stats.bootstrap`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .bootstrap import distinct_boots, percentile_ci
from .exact import (MAX_PAIRS, MIN_N_95, MW_EXACT_PAIRS, NAN, without_nans, mw_exact_p, signed_rank_p, bh_level,
                    median_ci, min_repetitions, mw_min_p, rounds_for_level, shift_ci, signed_rank_min_p, walsh_ci)

__all__ = [
    "Summary",
    "summarize",
    "Ratio",
    "ratio",
    "overhead",
    "relative_ci_halfwidth",
    "geometric_mean",
    "geomean_index_ci",
    "warnings_for",
    "median_ci",
    "shift_ci",
    "mw_min_p",
    "paired_ratio",
    "walsh_ci",
    "signed_rank_min_p",
    "ratio_halfwidth",
    "min_repetitions",
    "bh_level",
    "MAD_SCALE",
    "OUTLIER_THRESHOLD",
]

#: Scale that turns the median absolute deviation into a standard-deviation
#: estimate for normally distributed data.
MAD_SCALE = 1.4826
#: A point is an outlier when its robust z-score |x - median| / (MAD_SCALE * MAD)
#: exceeds this (Iglewicz and Hoaglin's recommended cut-off).
OUTLIER_THRESHOLD = 3.5


# --------------------------------------------------------------------------- helpers


def _check_params(confidence: float, resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}")
    if int(resamples) != resamples or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")


# --------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one set of repetitions of one metric.

    ``stdev`` is the sample standard deviation (ddof=1); ``ci_low``/``ci_high``
    bound the order-statistic confidence interval of the *median* and ``ci_level``
    is its real level (below ``confidence`` when n is too small); ``cv`` is
    ``stdev / |mean|``; ``outliers`` counts points whose robust z-score by
    median/MAD exceeds :data:`OUTLIER_THRESHOLD` (0 when MAD is 0).
    Spread, CI and cv are NaN when ``n < 2``; everything but ``n`` and
    ``outliers`` is NaN when ``n == 0``.
    """

    n: int
    median: float
    mean: float
    stdev: float
    ci_low: float
    ci_high: float
    cv: float
    outliers: int
    min: float
    max: float
    ci_level: float = NAN


def _count_outliers(x: np.ndarray, median: float) -> int:
    dev = np.abs(x - median)
    mad = float(np.median(dev))
    if mad == 0.0 or not math.isfinite(mad):
        return 0
    return int(np.count_nonzero(dev / (MAD_SCALE * mad) > OUTLIER_THRESHOLD))


def summarize(
    values: Iterable[float], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Summary:
    """Summarize repetitions of one metric (NaN values are dropped first).

    Never raises on too little data: empty input gives ``n=0`` and NaN fields.
    Raises ValueError only for an invalid ``confidence`` or ``resamples``.
    """
    _check_params(confidence, resamples)
    x = without_nans(values)
    n = int(x.size)
    if n == 0:
        return Summary(0, NAN, NAN, NAN, NAN, NAN, NAN, 0, NAN, NAN)
    # Infinite values are kept as data; they make mean/stdev/CI inf or NaN
    # without RuntimeWarnings.
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _summarize(x, n, confidence, resamples, seed)


def _summarize(x: np.ndarray, n: int, confidence: float, resamples: int, seed: int) -> Summary:
    median = float(np.median(x))
    mean = float(np.mean(x))
    lo = hi = stdev = cv = level = NAN
    if n >= 2:
        stdev = float(np.std(x, ddof=1))
        cv = stdev / abs(mean) if mean != 0.0 else NAN
        lo, hi, level = median_ci(x, confidence)
    return Summary(
        n=n,
        median=median,
        mean=mean,
        stdev=stdev,
        ci_low=lo,
        ci_high=hi,
        cv=cv,
        outliers=_count_outliers(x, median),
        min=float(np.min(x)),
        max=float(np.max(x)),
        ci_level=level,
    )


def relative_ci_halfwidth(
    values: Iterable[float], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> float:
    """Half the width of the median's CI relative to the median.

    ``(ci_high - ci_low) / 2 / |median|`` of :func:`summarize`; ``inf`` when
    there are fewer than 2 values, the median is 0, the CI is undefined or
    does not reach ``confidence`` (n too small), so an adaptive runner
    comparing it to a target keeps repeating.
    """
    s = summarize(values, confidence=confidence, resamples=resamples, seed=seed)
    if s.n < 2 or s.median == 0.0 or not (math.isfinite(s.ci_low) and math.isfinite(s.ci_high)) \
            or not s.ci_level >= confidence - 1e-12:
        return math.inf
    return (s.ci_high - s.ci_low) / 2.0 / abs(s.median)


# --------------------------------------------------------------------------- ratio to baseline


@dataclass(frozen=True)
class Ratio:
    """Candidate median / baseline median, with its CI and the Mann-Whitney U p-value.

    The ratio is raw: for a time metric 1.2 means 20 % slower, for a
    throughput metric 1.2 means 20 % faster. Use :func:`overhead` for a
    direction-aware cost. ``ci_level`` is the CI's real level, ``min_p`` the
    smallest p-value these group sizes allow, ``method`` how the CI was made
    ("signed-rank (paired rounds)": :func:`paired_ratio`; "mann-whitney": inverted exact test on
    logs of unpaired groups; "bootstrap": percentile).
    """

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool
    ci_level: float = NAN
    min_p: float = NAN
    method: str = ""
    pairs: int = 0  # rounds paired (paired_ratio); 0 for unpaired groups


def ratio(
    candidate: Iterable[float],
    baseline: Iterable[float],
    *,
    higher_is_better: bool = True,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> Ratio:
    """Compare a candidate platform's samples with the baseline's.

    * ``ratio``: median(candidate) / median(baseline); NaN when the baseline
      median is 0 or either group is empty.
    * ``ci_low``/``ci_high``: with positive values, the Hodges-Lehmann CI of
      the ratio (:func:`shift_ci` on logs), at ``confidence`` or, when the
      group sizes cannot reach it, the widest interval with its lower
      ``ci_level``; otherwise (zeros, negatives, more than ``MAX_PAIRS``
      pairs) the percentile bootstrap resampling both groups independently.
      NaN when either group has fewer than 2 values or the baseline median is 0.
    * ``p_value``: two-sided Mann-Whitney U, exact without ties (up to
      ``MW_EXACT_PAIRS`` pairs), else scipy's tie-corrected normal
      approximation; NaN when either group has fewer than 2 values or all
      values are identical.
    * ``significant``: ``p_value <= alpha`` and the ``1 - alpha`` interval
      excludes 1 (the same statement without ties); False when ``p_value`` is NaN.

    ``higher_is_better`` does not change any of these (the ratio is always
    raw); it is accepted so call sites can pass a sample's direction along
    unchanged, and is what :func:`overhead` needs.
    NaN values are dropped from both groups first.
    """
    del higher_is_better  # documented: no effect on the raw ratio
    _check_params(confidence, resamples)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1 (exclusive), got {alpha!r}")
    c = without_nans(candidate)
    b = without_nans(baseline)

    point = NAN
    if c.size and b.size:
        b_med = float(np.median(b))
        if b_med != 0.0:
            point = float(np.median(c)) / b_med

    lo = hi = p = level = min_p = NAN
    method = ""
    excludes_one = False
    if c.size >= 2 and b.size >= 2:
        min_p = mw_min_p(c.size, b.size)
        exact = bool(np.all(np.isfinite(c) & (c > 0)) and np.all(np.isfinite(b) & (b > 0))
                     and c.size * b.size <= MAX_PAIRS)
        if exact:
            lc, lb = np.log(c), np.log(b)
            log_lo, log_hi, level = shift_ci(lc, lb, confidence)
            lo, hi, method = math.exp(log_lo), math.exp(log_hi), "mann-whitney"
            t_lo, t_hi, _ = shift_ci(lc, lb, 1.0 - alpha)  # the test's own interval
            excludes_one = t_lo > 0.0 or t_hi < 0.0
        else:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                c_boot, b_boot = distinct_boots([c, b], resamples, seed)
                lo, hi = percentile_ci(c_boot / b_boot, confidence)
                t_lo, t_hi = percentile_ci(c_boot / b_boot, 1 - alpha)
            level, method = confidence, "bootstrap"
            excludes_one = t_lo > 1.0 or t_hi < 1.0
        if math.isnan(point):
            lo = hi = NAN
        both = np.concatenate([c, b])
        if not np.all(both == both[0]):
            if np.unique(both).size == both.size and c.size * b.size <= MW_EXACT_PAIRS:
                p = mw_exact_p(c, b)
            else:
                from scipy import stats as _sps  # imported here: scipy costs ~1 s at start-up

                p = float(_sps.mannwhitneyu(c, b, alternative="two-sided", method="asymptotic").pvalue)
    significant = bool(not math.isnan(p) and p <= alpha and excludes_one and not math.isnan(point))
    return Ratio(ratio=point, ci_low=lo, ci_high=hi, p_value=p, significant=significant,
                 ci_level=level, min_p=min_p, method=method)


def paired_ratio(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float = 0.95,
    alpha: float = 0.05,
) -> Ratio:
    """A candidate against the baseline from paired rounds: ``candidate[i]`` and ``baseline[i]`` were
    measured in the same round (interleaved, so drift and load of that round hit both).

    * A round with NaN on either side (a failed or missing repetition: a hole) is left out; the
      ratio uses the rounds with both (``pairs`` of them).
    * ``ratio``: exp of the Hodges-Lehmann estimate of the rounds' log ratios (the median of their
      Walsh averages); ``ci_low``/``ci_high``: the signed-rank test inverted (:func:`walsh_ci`) at
      ``confidence``, or the widest interval with its lower ``ci_level`` when the rounds cannot
      reach it; ``p_value``: the two-sided signed-rank test; ``min_p``: 2 / 2^pairs.
    * ``significant``: ``p_value <= alpha`` and the ``1 - alpha`` interval excludes 1.
    * Values that are not positive have no log: the unpaired :func:`ratio` of the rounds kept.
    NaN interval and p-value below 2 pairs.
    """
    if not 0.0 < confidence < 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence and alpha must be between 0 and 1 (exclusive), got {confidence!r}, {alpha!r}")
    c = np.asarray(candidate, dtype=float).ravel()
    b = np.asarray(baseline, dtype=float).ravel()
    if c.size != b.size:
        raise ValueError(f"paired rounds need as many candidate as baseline values, got {c.size} and {b.size}")
    keep = ~(np.isnan(c) | np.isnan(b))
    c, b = c[keep], b[keep]
    n = int(c.size)
    if n == 0:
        return Ratio(NAN, NAN, NAN, NAN, False, pairs=0)
    if not (np.all(np.isfinite(c) & (c > 0)) and np.all(np.isfinite(b) & (b > 0))):
        r = ratio(c, b, confidence=confidence, alpha=alpha)
        return Ratio(r.ratio, r.ci_low, r.ci_high, r.p_value, r.significant, r.ci_level, r.min_p,
                     r.method + " (unpaired: values not positive)", pairs=n)
    d = np.log(c) - np.log(b)
    if n < 2:
        return Ratio(float(math.exp(d[0])), NAN, NAN, NAN, False, pairs=n)
    est, lo, hi, level, method = walsh_ci(d, confidence)
    _, t_lo, t_hi, _, _ = walsh_ci(d, 1.0 - alpha)  # the test's own interval
    p = signed_rank_p(d)
    significant = bool(math.isfinite(p) and p <= alpha and (t_lo > 0.0 or t_hi < 0.0))
    return Ratio(math.exp(est), math.exp(lo), math.exp(hi), p, significant, level, signed_rank_min_p(n), method,
                 pairs=n)


def ratio_halfwidth(r: Ratio, confidence: float = 0.95) -> float:
    """Half the width of a ratio's CI relative to the ratio: what an adaptive run's ci_target is
    compared with. ``inf`` when the interval is missing or does not reach ``confidence`` (too few
    repetitions or rounds), so the runner keeps repeating."""
    if not (math.isfinite(r.ci_low) and math.isfinite(r.ci_high) and math.isfinite(r.ratio) and r.ratio > 0) \
            or not r.ci_level >= confidence - 1e-12:
        return math.inf
    return (r.ci_high - r.ci_low) / 2.0 / r.ratio


def overhead(r: Ratio, higher_is_better: bool) -> float:
    """Cost of the candidate as a fraction of the baseline (positive = worse).

    ``1 - ratio`` when higher is better (throughput 0.9x -> 0.10 overhead),
    ``ratio - 1`` when lower is better (time 1.2x -> 0.20 overhead).
    NaN ratio gives NaN.
    """
    return 1.0 - r.ratio if higher_is_better else r.ratio - 1.0


# --------------------------------------------------------------------------- indexes


def geometric_mean(values: Iterable[float]) -> float:
    """Geometric mean of positive values.

    Raises ValueError when there are no values or any value is not a positive
    finite number (NaN included: a missing test would silently change what an
    index means).
    """
    x = np.asarray(values if isinstance(values, (np.ndarray, Sequence)) else list(values),
                   dtype=float).ravel()
    if x.size == 0:
        raise ValueError("geometric mean of no values is undefined; pass at least one positive value")
    bad = ~(np.isfinite(x) & (x > 0))
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(
            f"geometric mean needs positive finite values; value #{i} is {x[i]!r} "
            "(a zero, negative or missing score cannot enter a geometric-mean index)"
        )
    return float(np.exp(np.mean(np.log(x))))


def geomean_index_ci(
    per_test_samples: list[list[float]],
    baselines: list[float],
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """Overall index over tests with a CI: ``(index, ci_low, ci_high)``.

    ``index = geometric_mean(median(samples_i) / baselines[i] * 10)`` over tests
    ``i`` (a platform equal to the baseline scores 10 on every test and
    overall). The CI is the geometric mean of the tests' order-statistic CI
    bounds (:func:`median_ci`, scored the same way): it covers whenever every
    test's interval does, and far more often in practice; ``resamples`` and
    ``seed`` are unused (kept for callers). NaNs are dropped from each
    test's samples. The CI is NaN when any test has fewer than 2 samples
    (its uncertainty is unknown) or a bound is not positive.

    Raises ValueError when the lists are empty or of different lengths, a
    test has no samples, or a baseline or test median is not positive.
    """
    _check_params(confidence, resamples)
    if len(per_test_samples) != len(baselines):
        raise ValueError(
            f"{len(per_test_samples)} tests but {len(baselines)} baselines; pass one baseline per test"
        )
    if not per_test_samples:
        raise ValueError("no tests given; an index needs at least one test")
    base = np.asarray(baselines, dtype=float)
    if not np.all(np.isfinite(base) & (base > 0)):
        raise ValueError(f"baselines must be positive finite numbers, got {list(baselines)!r}")
    tests = [without_nans(s) for s in per_test_samples]
    for i, x in enumerate(tests):
        if x.size == 0:
            raise ValueError(f"test #{i} has no samples; run it or leave it out of the index")

    scores = [float(np.median(x)) / base[i] * 10.0 for i, x in enumerate(tests)]
    index = geometric_mean(scores)

    if any(x.size < 2 for x in tests):
        return index, NAN, NAN
    # Geometric means of the tests' order-statistic bounds: conservative, and unlike a bootstrap of the
    # index it holds with skewed or bimodal tests, where small-n medians are biased and a bootstrap
    # centred on them covered 24-92 % (bench/ci_coverage.py). Its level: that of the tests' intervals.
    bounds = np.array([median_ci(x, confidence)[:2] for x in tests]) / base[:, None] * 10.0
    if not np.all(np.isfinite(bounds) & (bounds > 0)):
        return index, NAN, NAN
    lo, hi = np.exp(np.mean(np.log(bounds), axis=0))
    return index, float(lo), float(hi)


def index_ratio(
    candidate_tests: list[list[float]],
    baseline_tests: list[list[float]],
    baselines: list[float],
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Ratio:
    """Ratio of two overall indexes (candidate / baseline) with a bootstrap CI.

    Each test's median is bootstrapped independently (percentile method; its
    coverage holds at every n from 3 in bench/ci_coverage.py, where the bias of
    skewed tests' medians cancels between the two sides). An index is not a
    sample of one distribution, so there is no rank test here: ``significant``
    means the CI excludes 1 (``p_value`` is NaN).
    """
    cand, _, _ = geomean_index_ci(candidate_tests, baselines, resamples=resamples, seed=seed, confidence=confidence)
    base, _, _ = geomean_index_ci(baseline_tests, baselines, resamples=resamples, seed=seed, confidence=confidence)
    point = cand / base
    tests = [without_nans(s) for s in candidate_tests] + [without_nans(s) for s in baseline_tests]
    if any(x.size < 2 for x in tests):
        return Ratio(point, NAN, NAN, NAN, False)
    log_ratio = np.zeros(int(resamples))
    k = len(baselines)
    boots = distinct_boots(tests, resamples, seed)  # candidate tests, then baseline tests
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(k):
            log_ratio += np.log(boots[i])
            log_ratio -= np.log(boots[k + i])
    lo, hi = percentile_ci(np.exp(log_ratio / k), confidence)
    significant = bool(np.isfinite(lo) and np.isfinite(hi) and (lo > 1.0 or hi < 1.0))
    return Ratio(point, lo, hi, NAN, significant, ci_level=confidence, method="bootstrap")


# --------------------------------------------------------------------------- warnings


def warnings_for(summary: Summary, *, cv_limit: float = 0.05) -> list[str]:
    """Sentences telling the user what is wrong with a summary and what to do.

    Empty list when nothing is wrong.
    """
    out: list[str] = []
    n = summary.n
    if n == 0:
        out.append("no samples: nothing was measured; check that the workload ran and its output was parsed")
        return out
    # the advice is the number the intervals really need (stats_exact.MIN_N_95), not a round number
    need = max(MIN_N_95["median"], MIN_N_95["signed-rank"])
    if n == 1:
        out.append(f"only 1 sample: no confidence interval; run at least {need} repetitions "
                   "(a 95 % interval needs that many)")
    elif n < need:
        out.append(f"only {n} samples: the median's interval [min, max] reaches {1 - 2 * 0.5 ** n:.1%}, not 95 %; "
                   f"run at least {need} repetitions")
    if math.isfinite(summary.cv) and summary.cv > cv_limit:
        out.append(
            f"noisy: coefficient of variation {summary.cv * 100:.1f}% (> {cv_limit * 100:g}%); "
            "close other programs, pin CPU frequency, or add repetitions"
        )
    if summary.outliers > 0:
        out.append(
            f"{summary.outliers} outlier(s) by median/MAD; look for interference during the run"
        )
    return out
