"""Coverage of every interval the tables use (issue 14): a short run of bench/ci_coverage.py (the
full one has 2000 data sets per cell). A method claiming 95 % must cover at least 93 %; one
labelled with a lower level (n too small) must hold that level."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import ci_coverage  # noqa: E402

from virtbench import stats  # noqa: E402


def test_every_method_the_tables_use_holds_its_level():
    rows = ci_coverage.run([3, 4, 5, 6, 8, 12, 30], trials=1000, contrast=False)
    rows += ci_coverage.run([3, 6], trials=0, index_trials=60, only_index=True)
    judged = [r for r in rows if r["ok"] is not None]
    assert {r["method"].split(":")[0] for r in judged} == {"median", "ratio", "index", "index ratio"}
    assert ci_coverage.failures(rows) == []
    # and the 95 % claims start where they should: 6 values for a median, 4 per side for a ratio
    first95 = {m: min(r["n"] for r in judged if r["method"] == m and r["level"] >= 0.95)
               for m in ("median: order statistics", "ratio: Mann-Whitney")}
    assert first95 == {"median: order statistics": 6, "ratio: Mann-Whitney": 4}


def test_paired_rounds_hold_their_level_under_drift_and_bursts():
    """Issue 24: the paired (signed-rank) interval and the unpaired one on the same simulated runs,
    under no load, drift, bursts that hit whole rounds and bursts that hit one side only."""
    rows = ci_coverage.run([3, 6, 12, 20], trials=300, contrast=False, scenarios=ci_coverage.SCENARIOS)
    paired = [r for r in rows if "|" in r["method"]]
    assert {r["method"].split(" | ")[1] for r in paired} == set(ci_coverage.SCENARIOS)
    assert all(r["ok"] is not None for r in paired)  # every one judged, at its own level
    assert ci_coverage.failures(paired) == []

    def width(method, scenario, n=20):
        return np.median([r["halfwidth"] for r in paired
                          if r["method"] == f"ratio: {method} | {scenario}" and r["n"] == n])
    # what pairing is for: load common to a round cancels in its ratio
    assert width("signed-rank, paired rounds", "drift") < 0.5 * width("Mann-Whitney, unpaired", "drift")
    assert width("signed-rank, paired rounds", "round bursts") < width("Mann-Whitney, unpaired", "round bursts")


def test_the_old_bootstrap_of_a_median_fails_where_it_claimed_95():
    cov, claimed = ci_coverage.bootstrap_median_coverage("normal", 3, 400, 1)
    assert claimed == 0.95 and cov < 0.8  # [min, max] of 3 values is a 75 % interval


@pytest.mark.parametrize("n,level", [(3, 0.75), (4, 0.875), (5, 0.9375), (6, 1 - 2 / 64)])
def test_median_ci_levels_are_binomial(n, level):
    lo, hi, got = stats.median_ci(np.arange(n, dtype=float))
    assert (lo, hi) == (0.0, n - 1.0) and got == pytest.approx(level)


def test_ratio_ci_level_and_smallest_p():
    r = stats.ratio([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert r.ci_level == pytest.approx(0.9) and r.min_p == pytest.approx(0.1) and r.p_value == pytest.approx(0.1)
    assert not r.significant  # 3 against 3 cannot reach p <= 0.05, however far apart
    r = stats.ratio([1.0, 2.0, 3.0, 3.5], [4.0, 5.0, 6.0, 7.0])
    assert r.min_p == pytest.approx(2 / 70) and r.significant and r.ci_high < 1.0
    assert stats.min_repetitions() == 6 and math.isclose(stats.mw_min_p(6, 6), 2 / 924)
