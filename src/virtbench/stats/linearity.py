"""How straight a line through k typical values can be, given an interval for each: the range of R^2.

R^2 of a straight line fitted to the points (x_i, m_i) is 1 - SS_res / SS_tot. When each m_i is
only known to lie in [lo_i, hi_i] (intervals that hold together, e.g. the order-statistic intervals
of each x's median), the R^2 of the true values lies in [min, max] of R^2 over that box: a
confidence interval for it at the box's joint level (a projection of the box: valid, conservative).

Exact, no search heuristics: R^2 >= r over the box exactly where the quadratic form
r * SS_tot(m) - SS_reg(m) reaches <= 0 somewhere in the box, and the minimum of a quadratic over a
box lies at a stationary point of one of its faces (3^k of them, each a small linear system;
k <= MAX_POINTS). The bounds are found by bisection on r. Pure functions, no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

MAX_POINTS = 7  # 3^7 faces a bisection step: about 2 s for 7 values, 0.07 s for 4
_TOL = 1e-6


def _forms(xs: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The matrices of SS_tot(m) = m'Tm and SS_reg(m) = m'Rm for a line fitted at `xs`."""
    k = len(xs)
    x = np.asarray(xs, dtype=float)
    c = x - x.mean()
    centre = np.eye(k) - np.full((k, k), 1.0 / k)
    reg = np.outer(c, c) / float(c @ c)
    return centre, reg


def _box_min(q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """The minimum of m'Qm over the box lo <= m <= hi (Q symmetric, k small): every face, each
    coordinate at its low end, its high end or free, with the free ones solving Q_ff m_f = -Q_fb m_b;
    the smallest value among the points that lie in the box (the vertices always do)."""
    k = len(lo)
    best = math.inf
    for pick in itertools.product((0, 1, 2), repeat=k):
        m = np.where(np.array(pick) == 1, hi, lo).astype(float)
        free = [i for i in range(k) if pick[i] == 2]
        if free and any(hi[i] == lo[i] for i in free):
            continue  # a point interval has no free face; its ends are the same vertex
        if free:
            fixed = [i for i in range(k) if pick[i] != 2]
            rhs = -q[np.ix_(free, fixed)] @ m[fixed] if fixed else np.zeros(len(free))
            sol, *_ = np.linalg.lstsq(q[np.ix_(free, free)], rhs, rcond=None)
            m[free] = sol
            span = hi - lo
            if np.any(m < lo - 1e-9 * (1 + span)) or np.any(m > hi + 1e-9 * (1 + span)):
                continue
            m = np.clip(m, lo, hi)
        best = min(best, float(m @ q @ m))
    return best


def r2_range(xs: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> tuple[float, float]:
    """(smallest, largest) R^2 of a straight line through (xs[i], m_i) over every m with
    lows[i] <= m_i <= highs[i]. A box that holds equal values for every x (a flat line, R^2
    undefined) reaches both 0 and 1."""
    if not (len(xs) == len(lows) == len(highs)) or len(set(xs)) != len(xs) or len(xs) < 3:
        raise ValueError("r2_range needs at least 3 distinct x values, one interval each")
    if len(xs) > MAX_POINTS:
        raise ValueError(f"r2_range handles at most {MAX_POINTS} x values (3^k faces); got {len(xs)}")
    lo, hi = np.asarray(lows, dtype=float), np.asarray(highs, dtype=float)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo <= hi)):
        raise ValueError("r2_range needs finite intervals, low <= high")
    # scale so the tolerances mean the same whatever the unit
    scale = float(max(np.max(np.abs(lo)), np.max(np.abs(hi)), 1e-300))
    lo, hi = lo / scale, hi / scale
    tot, reg = _forms(xs)

    def reaches_at_least(r: float) -> bool:  # some m in the box with R^2 >= r (or SS_tot = 0)
        return _box_min(r * tot - reg, lo, hi) <= 1e-12

    def reaches_at_most(r: float) -> bool:  # some m in the box with R^2 <= r
        return _box_min(reg - r * tot, lo, hi) <= 1e-12

    def edge(pred, want_high: bool) -> float:
        a, b = 0.0, 1.0
        if want_high:  # the largest r with pred(r)
            if pred(1.0):
                return 1.0
            while b - a > _TOL:
                mid = (a + b) / 2
                a, b = (mid, b) if pred(mid) else (a, mid)
            return b  # the true largest lies in [a, b): the wider end
        if pred(0.0):  # the smallest r with pred(r)
            return 0.0
        while b - a > _TOL:
            mid = (a + b) / 2
            a, b = (a, mid) if pred(mid) else (mid, b)
        return a  # the true smallest lies in (a, b]: the wider end

    return edge(reaches_at_most, False), edge(reaches_at_least, True)
