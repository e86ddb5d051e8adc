"""How a table's ratios were computed, in words, read from what its rows record (`ratio_ci_method`).

One source for the terminal legends, the report's marks and its methods note, so none of them names a
test the analysis did not run: a run's ratios come from its lockstep rounds (signed-rank /
Hodges-Lehmann on the rounds' log ratios, stats.paired_ratio); runs stored without rounds and
`compare` of two runs use the unpaired ratio of medians (Mann-Whitney, stats.ratio).
"""

from __future__ import annotations

from collections.abc import Iterable

from .exact import MIN_N_95

PAIRED = "paired"        # exact signed-rank test inverted over the rounds' log ratios
SIGN = "sign"            # the sign test's interval over the rounds (very many rounds)
UNPAIRED = "unpaired"    # ratio of medians, exact Mann-Whitney test inverted on log values
BOOTSTRAP = "bootstrap"  # ratio of medians, percentile bootstrap (values not positive, huge groups)
ORDER = (PAIRED, SIGN, UNPAIRED, BOOTSTRAP)

PHRASES = {  # {b}: the baseline's name
    PAIRED: ("= the Hodges-Lehmann estimate of the lockstep rounds' environment / {b} ratios, its CI the "
             "exact Wilcoxon signed-rank test on their logs, inverted (each round's two values paired, so with "
             "few rounds it can point the other way from the two medians, which are not)"),
    SIGN: "= the median of the lockstep rounds' environment / {b} ratios, its CI the sign test's",
    UNPAIRED: ("= environment median / {b} median, its CI the exact Mann-Whitney test on log values, inverted "
               "(Hodges-Lehmann), the repetitions taken as unpaired"),
    BOOTSTRAP: "= environment median / {b} median, its CI a percentile bootstrap",
}


def kind(method: str | None) -> str | None:
    """The kind of a row's `ratio_ci_method` ("signed-rank (paired rounds)", "mann-whitney", ...)."""
    m = (method or "").lower()
    if not m:
        return None
    if m.startswith("signed-rank"):
        return PAIRED
    if m.startswith("sign test"):
        return SIGN
    if m.startswith("mann-whitney"):
        return UNPAIRED
    if m.startswith("bootstrap"):
        return BOOTSTRAP
    return None


def kinds(rows: Iterable[dict]) -> list[str]:
    """The kinds the rows' ratios used, index rows aside (an index ratio is always a bootstrap)."""
    found = {kind(r.get("ratio_ci_method")) for r in rows if r.get("metric") != "index"}
    return [k for k in ORDER if k in found]


def ratio_phrase(rows: Iterable[dict], default: str = PAIRED, baseline: str = "baseline") -> str:
    """'ratio to <baseline> <how>' for the kinds in rows (`default` when none has a ratio)."""
    used = kinds(rows) or [default]
    if len(used) == 1:
        return f"ratio to {baseline} {PHRASES[used[0]].format(b=baseline)}"
    return f"ratio to {baseline}: " + "; ".join(f"{_where(k)} {PHRASES[k].format(b=baseline)}" for k in used)


def _where(k: str) -> str:
    return {PAIRED: "rows with rounds", SIGN: "rows with very many rounds",
            UNPAIRED: "rows stored without rounds (before lockstep rounds)", BOOTSTRAP: "rows with values not positive"}[k]


def smallest_p_text(rows: Iterable[dict]) -> str:
    """How many repetitions reach which p: for the rounds (signed-rank) or the groups (Mann-Whitney)."""
    used = set(kinds(rows)) or {PAIRED}
    parts = []
    if used & {PAIRED, SIGN}:
        parts.append("6 rounds reach p = 0.031, 8 reach 0.0078")
    if UNPAIRED in used:
        parts.append("4 per side reach p = 0.029 unpaired, 6 reach 0.0022")
    return "; ".join(parts)


def minimum_text() -> str:
    """How many values each interval needs for 95 % at all (stats.exact.MIN_N_95), in words."""
    n = MIN_N_95
    return (f"95 % needs {n['median']} values for a median, {n['signed-rank']} rounds for a paired ratio, "
            f"{n['mann-whitney']} values a side for an unpaired one")
