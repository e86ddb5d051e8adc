"""The verdict a ratio's confidence interval supports: faster, slower, equivalent or inconclusive.

One rule, read by the tables (``stats/verdicts.py``, after the table's Benjamini-Hochberg correction)
and by the studies' scorecard ("about the same" findings), so both use the same four words with the
same meaning (issue 32). Pure, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["FASTER", "SLOWER", "EQUIVALENT", "INCONCLUSIVE", "VERDICTS", "DEFAULT_MARGIN",
           "IntervalVerdict", "interval_verdict"]

FASTER = "faster"
SLOWER = "slower"
EQUIVALENT = "equivalent"
INCONCLUSIVE = "inconclusive"
VERDICTS = (FASTER, SLOWER, EQUIVALENT, INCONCLUSIVE)

#: Equivalence margin when the user states none: a ratio within [1/1.02, 1.02] is "the same".
DEFAULT_MARGIN = 0.02

_TOL = 1e-12


@dataclass(frozen=True)
class IntervalVerdict:
    """What :func:`interval_verdict` read: ``verdict`` (one of :data:`VERDICTS`); ``detectable``,
    the largest change in either direction the interval leaves open, ``max(1/low, high) - 1``
    (an inconclusive row could not tell a difference below it from none; None when there is no
    interval or it is below the level the verdict needs); ``margin``; ``level``, the interval's
    own level; ``reason``: "n too small" when the interval cannot reach the needed level, "no
    interval" when it is missing, else ""."""

    verdict: str
    detectable: float | None
    margin: float
    level: float
    reason: str = ""


def interval_verdict(low: float, high: float, *, level: float, needed: float = 0.95,
                     margin: float = DEFAULT_MARGIN, higher_is_better: bool = True) -> IntervalVerdict:
    """Read a ratio's interval ``[low, high]`` (candidate / baseline, raw) at its real ``level``.

    * **equivalent**: the whole interval lies inside the margin, ``1/(1+margin) <= low`` and
      ``high <= 1+margin`` (symmetric on the log scale, so "2 % slower" and "2 % faster" are
      the same distance; the low bound is then at least ``1 - margin`` too). This is the two
      one-sided tests (TOST) with the interval *as printed*: an interval at level ``1 - a`` inside
      the margin rejects both "at least margin slower" and "at least margin faster" at ``a/2``
      each. The textbook TOST at ``a`` would read the narrower ``1 - 2a`` interval (90 % for
      a = 0.05); we read the printed one (95 %, or the table's corrected level) instead, so that
      a reader can check every "equivalent" against the interval beside it and a table's four
      verdicts all come from one interval. It is conservative by a factor of two in a.
      Equivalence is read first: an interval that excludes 1 but lies inside the margin (a real
      difference smaller than the one that matters) is "equivalent".
    * **faster** / **slower**: otherwise, the interval excludes 1: ``low > 1`` is faster when
      ``higher_is_better`` (throughput), slower when not (time); ``high < 1`` the other way round.
      For a table, pass the interval at the Benjamini-Hochberg corrected level as ``level`` and
      ``needed``, so "excludes 1" is the corrected test.
    * **inconclusive**: neither; ``detectable`` says how large a difference could have hidden in
      the interval. Also every interval below ``needed`` (too few values or rounds for that
      level: ``reason`` "n too small", ``detectable`` None) and a missing one (NaN bounds).

    ``margin`` must be positive and finite; ``level`` and ``needed`` in (0, 1).
    """
    if not (margin > 0 and math.isfinite(margin)):
        raise ValueError(f"the equivalence margin must be a positive fraction such as 0.02, got {margin!r}")
    if not 0.0 < needed < 1.0:
        raise ValueError(f"needed level must be between 0 and 1 (exclusive), got {needed!r}")
    if not (math.isfinite(low) and math.isfinite(high) and 0.0 < low <= high):
        return IntervalVerdict(INCONCLUSIVE, None, margin, level, "no interval")
    if not level >= needed - _TOL:
        return IntervalVerdict(INCONCLUSIVE, None, margin, level, "n too small")
    detectable = max(1.0 / low, high) - 1.0
    if detectable <= margin + _TOL:
        return IntervalVerdict(EQUIVALENT, detectable, margin, level)
    if low > 1.0:
        return IntervalVerdict(FASTER if higher_is_better else SLOWER, detectable, margin, level)
    if high < 1.0:
        return IntervalVerdict(SLOWER if higher_is_better else FASTER, detectable, margin, level)
    return IntervalVerdict(INCONCLUSIVE, detectable, margin, level)
