"""Exact (distribution-free) intervals and tests behind :mod:`virtbench.stats`.

The rank-based pieces a median's CI and a ratio's CI are built from: the order-statistic interval
of a median (sign test inverted), the Mann-Whitney and Wilcoxon signed-rank tests inverted into
Hodges-Lehmann intervals with their exact null distributions, the repetitions those tests need,
and the Benjamini-Hochberg level over one table. Split out of ``stats/`` (issue 23) so that
module stays at summaries, ratios and indexes; ``stats`` re-exports every public name here, so
``stats.median_ci`` etc. keep working. Pure functions, no I/O; the same conventions as ``stats``
(NaN values dropped, too little data gives NaN, never an exception).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "median_ci",
    "shift_ci",
    "mw_min_p",
    "walsh_ci",
    "signed_rank_min_p",
    "rounds_for_level",
    "min_repetitions",
    "min_n",
    "MIN_N_95",
    "paired_halfwidth",
    "rounds_for_halfwidth",
    "bh_level",
    "MW_EXACT_PAIRS",
    "MAX_PAIRS",
    "SR_EXACT_PAIRS",
]

NAN = float("nan")


def without_nans(values: Iterable[float]) -> np.ndarray:
    """Values as a 1-D float array with NaNs dropped."""
    if not isinstance(values, (np.ndarray, Sequence)):
        values = list(values)
    arr = np.asarray(values, dtype=float).ravel()
    return arr[~np.isnan(arr)]


# --------------------------------------------------------------------------- exact intervals


@functools.lru_cache(maxsize=256)
def _binom_half_cdf(n: int) -> np.ndarray:
    """P(B <= k) for B ~ Bin(n, 1/2), k = 0..n."""
    logc = np.array([math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(n + 1)])
    return np.cumsum(np.exp(logc - n * math.log(2.0)))


def median_ci(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free CI of the median: ``(low, high, level)``.

    The order statistics ``[x_(j), x_(n+1-j)]`` with the largest ``j`` whose level
    ``1 - 2 P(B <= j-1)``, ``B ~ Bin(n, 1/2)``, is at least ``confidence``; when even
    ``[min, max]`` falls short (95 %: n < 6) it is returned with its own, lower level.
    Exact for any continuous distribution, conservative with ties. NaN below 2 values.
    """
    x = np.sort(without_nans(values))
    n = x.size
    if n < 2:
        return NAN, NAN, NAN
    levels = 1.0 - 2.0 * _binom_half_cdf(n)[: n // 2]  # for j = 1 .. n//2
    ok = np.nonzero(levels >= confidence - 1e-12)[0]
    j = int(ok[-1]) + 1 if ok.size else 1
    return float(x[j - 1]), float(x[n - j]), float(levels[j - 1])


#: Exact Mann-Whitney distribution up to this many pairs; a normal approximation above.
MW_EXACT_PAIRS = 20_000
#: Pairwise differences held in memory at most; larger groups fall back to the bootstrap.
MAX_PAIRS = 4_000_000


@functools.lru_cache(maxsize=512)
def _mw_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u), u = 0..m*n, for the Mann-Whitney U of m and n values without ties (exact).

    The counts are the coefficients of the Gaussian binomial [m+n choose m]_q =
    prod_{i<=m} (1 - q^(n+i)) / (1 - q^i), in exact integers.
    """
    size = m * n + 1
    c = np.zeros(size, dtype=object)
    c[:] = 0
    c[0] = 1
    for i in range(1, m + 1):
        s = n + i
        if s < size:
            c[s:] = c[s:] - c[:-s]
        pad = (-size) % i  # divide by (1 - q^i): a running sum within each residue class mod i
        c = np.cumsum(np.concatenate([c, np.zeros(pad, dtype=object)]).reshape(-1, i), axis=0).ravel()[:size]
    cum = np.cumsum(c)
    total = cum[-1]
    return np.array([v / total for v in cum], dtype=float)


def mw_min_p(m: int, n: int) -> float:
    """Smallest two-sided p-value the exact Mann-Whitney test can give for groups of m and n:
    2 / C(m+n, m) (0.1 at 3 and 3, 0.029 at 4 and 4, 0.0022 at 6 and 6)."""
    if m < 1 or n < 1:
        return NAN
    return min(1.0, 2.0 / math.comb(m + n, m))


def mw_exact_p(c: np.ndarray, b: np.ndarray) -> float:
    """Exact two-sided Mann-Whitney p-value (no ties), as scipy's method='exact'."""
    u = int(np.count_nonzero(c[:, None] > b[None, :]))
    cdf = _mw_cdf(c.size, b.size)
    tail = min(cdf[u], cdf[c.size * b.size - u])  # P(U <= u) and P(U >= u), by symmetry
    return float(min(1.0, 2.0 * tail))


def shift_ci(x: np.ndarray, y: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Hodges-Lehmann CI of the shift between x and y (the Mann-Whitney test inverted):
    ``(low, high, level)``.

    ``[D_(k), D_(N+1-k)]`` over the N = m n pairwise differences x_i - y_j, with k the
    largest whose level ``1 - 2 P(U <= k-1)`` is at least ``confidence``; when even
    ``[min D, max D]`` falls short it is returned with its lower level. Exact (distribution-free)
    when x's distribution is y's shifted; it excludes 0 exactly when the exact two-sided
    p-value is at most ``1 - level``.
    """
    m, n = x.size, y.size
    d = np.sort((x[:, None] - y[None, :]).ravel())
    big = d.size
    alpha = 1.0 - confidence
    if m * n <= MW_EXACT_PAIRS:
        cdf = _mw_cdf(int(m), int(n))
        k = max(1, int(np.searchsorted(2.0 * cdf, alpha + 1e-12, side="right")))
        level = 1.0 - 2.0 * cdf[k - 1]
    else:
        from statistics import NormalDist

        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        k = max(1, int(math.floor(big / 2.0 - z * math.sqrt(m * n * (m + n + 1) / 12.0))))
        level = confidence
    return float(d[k - 1]), float(d[big - k]), float(level)


#: Exact signed-rank distribution up to this many pairs; a normal approximation above.
SR_EXACT_PAIRS = 300


@functools.lru_cache(maxsize=512)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(T <= t), t = 0..n(n+1)/2, for the Wilcoxon signed-rank statistic T (sum of the ranks of the
    positive differences) of n nonzero differences without ties: the coefficients of
    prod_{i<=n} (1 + q^i) / 2, each factor halving so the floats stay probabilities."""
    size = n * (n + 1) // 2 + 1
    p = np.zeros(size)
    p[0] = 1.0
    for i in range(1, n + 1):
        p[i:] = (p[i:] + p[:-i]) / 2.0
        p[:i] /= 2.0
    return np.cumsum(p)


def signed_rank_min_p(n: int) -> float:
    """Smallest two-sided p-value the exact signed-rank test can give with n pairs: 2 / 2^n
    (0.25 at 3, 0.0625 at 5, 0.031 at 6, 0.0078 at 8)."""
    return NAN if n < 1 else min(1.0, 2.0 * 0.5 ** n)


def walsh_ci(d: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float, float, str]:
    """The signed-rank test inverted: ``(estimate, low, high, level, method)`` for the centre of the
    differences ``d`` (here the rounds' log ratios).

    The Hodges-Lehmann estimate is the median of the N = n(n+1)/2 Walsh averages (d_i + d_j) / 2,
    i <= j; the interval is ``[W_(k), W_(N+1-k)]`` with k the largest whose level
    ``1 - 2 P(T <= k-1)`` is at least ``confidence`` (when even ``[min W, max W]`` falls short it is
    returned with its lower level). Exact (distribution-free) for differences symmetric about their
    centre. Above ``MAX_PAIRS`` Walsh averages the sign test's interval (order statistics of d, no
    symmetry needed) stands in, centred on the median of d.
    """
    n = d.size
    alpha = 1.0 - confidence
    if n * (n + 1) // 2 > MAX_PAIRS:
        lo, hi, level = median_ci(d, confidence)
        return float(np.median(d)), lo, hi, level, "sign test (paired rounds)"
    i, j = np.triu_indices(n)
    w = np.sort((d[i] + d[j]) / 2.0)
    big = w.size
    if n <= SR_EXACT_PAIRS:
        cdf = _signed_rank_cdf(int(n))
        k = max(1, int(np.searchsorted(2.0 * cdf, alpha + 1e-12, side="right")))
        level = 1.0 - 2.0 * cdf[k - 1]
    else:
        from statistics import NormalDist

        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        k = max(1, int(math.floor(big / 2.0 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0))))
        level = confidence
    return float(np.median(w)), float(w[k - 1]), float(w[big - k]), float(level), "signed-rank (paired rounds)"


def signed_rank_p(d: np.ndarray) -> float:
    """Two-sided signed-rank p-value of d against 0: exact without zeros and ties (up to
    SR_EXACT_PAIRS), else scipy's normal approximation (zeros dropped, ties corrected)."""
    if np.all(d == 0.0):
        return NAN
    n = d.size
    if n <= SR_EXACT_PAIRS and np.all(d != 0.0) and np.unique(np.abs(d)).size == n:
        i, j = np.triu_indices(n)
        t = int(np.count_nonzero(d[i] + d[j] > 0.0))  # T+ = how many Walsh averages are positive
        cdf = _signed_rank_cdf(int(n))
        tail = min(cdf[t], cdf[n * (n + 1) // 2 - t])
        return float(min(1.0, 2.0 * tail))
    from scipy import stats as _sps  # imported here: scipy costs ~1 s at start-up

    return float(_sps.wilcoxon(d, alternative="two-sided", method="approx").pvalue)


def rounds_for_level(confidence: float) -> int:
    """Fewest rounds whose exact signed-rank interval can reach ``confidence`` at all: its widest
    interval, [min, max] of the Walsh averages, has level 1 - 2 / 2^n (8 rounds for a table of 6
    comparisons read at 1 - 0.05 / 6, 10 for 24). Below that a ratio's interval cannot meet a
    ci_target at that level however quiet the machine."""
    n = 1
    while 1.0 - 2.0 * 0.5 ** n < confidence - 1e-12:
        n += 1
    return n


def min_repetitions(confidence: float = 0.95, alpha: float = 0.05) -> int:
    """Repetitions per environment a verdict needs: enough for the median's order-statistic CI to
    reach ``confidence`` and for the exact Mann-Whitney and signed-rank tests to reach p <= ``alpha``
    with that many on each side or rounds (6 at 95 % and 0.05: [min, max] of 6 values is a 96.9 %
    interval, 6 rounds give p >= 0.031)."""
    n = 2
    while 1.0 - 2.0 * 0.5 ** n < confidence or mw_min_p(n, n) > alpha or signed_rank_min_p(n) > alpha:
        n += 1
    return n


def min_n(method: str, confidence: float = 0.95) -> int:
    """The fewest values with which a method's interval can reach ``confidence`` at all (below it
    the interval is the widest there is, at a lower level that the row states; see MIN_N_95):

    * "median": values, the order-statistic interval [min, max] has level 1 - 2 / 2^n (95 %: 6,
      at 96.9 %; 3 values: 75 %, 5: 93.75 %);
    * "signed-rank" (paired rounds) and "sign" (its stand-in for very many rounds): rounds, the
      same 1 - 2 / 2^n (95 %: 6);
    * "mann-whitney" (unpaired groups): values per side with equal groups, level 1 - 2 / C(2n, n)
      (95 %: 4, at 97.1 %; 2 vs 2: 66.7 %, 3 vs 3: 90 %); unequal groups m, n reach it when
      2 / C(m+n, m) <= 1 - confidence (2 vs 3: 80 %; 3 vs 5 and 2 vs 8 reach 95 %);
    * "bootstrap": no exact level at any n; virtbench claims its nominal level from the
      Mann-Whitney minimum on (an index ratio with fewer states none).

    For a table's corrected level pass it as ``confidence`` (6 comparisons: 1 - 0.05 / 6 needs 8
    rounds)."""
    if method in ("median", "signed-rank", "sign"):
        return rounds_for_level(confidence)
    if method in ("mann-whitney", "bootstrap"):
        n = 1
        while 1.0 - mw_min_p(n, n) < confidence - 1e-12:
            n += 1
        return n
    raise ValueError(f"unknown interval method {method!r}; one of median, signed-rank, sign, mann-whitney, bootstrap")


#: The one place that says how many values (rounds, or values per side) each interval needs for 95 %:
#: {"median": 6, "signed-rank": 6, "sign": 6, "mann-whitney": 4, "bootstrap": 4}.
MIN_N_95 = {m: min_n(m) for m in ("median", "signed-rank", "sign", "mann-whitney", "bootstrap")}


@functools.lru_cache(maxsize=4096)
def paired_halfwidth(sd: float, rounds: int, confidence: float = 0.95) -> float:
    """The ratio CI half-width (relative to the ratio, as ``stats.ratio_halfwidth``) that the exact
    signed-rank interval gives from ``rounds`` rounds whose log ratios have standard deviation ``sd``:
    read from an ideal sample (sd times the normal quantiles at (i + 0.5) / rounds), so a typical
    run's figure, not a bound; ``inf`` where the rounds cannot reach ``confidence`` at all. With
    sd 3 % it is 2.0 % at 20 rounds and 99.2 %, 1.3 % at 40. A planning estimate: real rounds
    scatter around it."""
    if not (sd >= 0 and math.isfinite(sd)) or rounds < rounds_for_level(confidence):
        return math.inf
    from statistics import NormalDist

    q = NormalDist().inv_cdf
    d = np.array([sd * q((i + 0.5) / rounds) for i in range(rounds)])
    est, lo, hi, _, _ = walsh_ci(d, confidence)
    return (math.exp(hi) - math.exp(lo)) / 2.0 / math.exp(est)


def rounds_for_halfwidth(sd: float, target: float, confidence: float = 0.95, limit: int = 2000) -> int | None:
    """The fewest rounds whose :func:`paired_halfwidth` at ``confidence`` is within ``target``; None
    when even ``limit`` rounds are not enough."""
    low, high = rounds_for_level(confidence), limit
    if paired_halfwidth(sd, high, confidence) > target:
        return None
    while low < high:  # the half-width shrinks as rounds grow: bisect
        mid = (low + high) // 2
        if paired_halfwidth(sd, mid, confidence) <= target:
            high = mid
        else:
            low = mid + 1
    return low


def bh_level(p_values: Sequence[float], min_ps: Sequence[float], q: float = 0.05) -> tuple[float, int, int]:
    """Benjamini-Hochberg at false discovery rate ``q`` over one table's comparisons:
    ``(threshold, tested, rejected)``.

    Only comparisons whose smallest attainable p-value is at most ``q`` are counted (Gilbert's
    2005 screen for discrete tests: the others can never be rejected and would only dilute the
    rest); a NaN p-value (all values identical) counts as 1. ``threshold`` is ``R q / m`` (R
    rejected of m tested), or ``q / m`` when nothing is rejected: intervals at level
    ``1 - threshold`` are Benjamini and Yekutieli's (2005) false-coverage-rate adjusted intervals,
    and a comparison is rejected exactly when its interval at that level excludes no change.
    """
    ps = sorted(1.0 if not math.isfinite(p) else p for p, mp in zip(p_values, min_ps)
                if math.isfinite(mp) and mp <= q)
    m = len(ps)
    if m == 0:
        return q, 0, 0
    rejected = max((k for k in range(1, m + 1) if ps[k - 1] <= k * q / m + 1e-15), default=0)
    return (rejected or 1) * q / m, m, rejected
