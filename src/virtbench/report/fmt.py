"""Number formatting shared by every report output, so HTML, Markdown and the terminal agree.

Tests format analysis.results() with these same functions and compare strings.
"""

from __future__ import annotations

import datetime as dt

from ..stats.ratio_methods import ratio_phrase
from ..render import mark as verdict_mark
from ..render import num

__all__ = ["value", "ratio", "p_value", "mark", "levels", "level", "when", "seconds", "MARK_HELP",
           "COMPARE_HELP", "ratio_note"]

# Which test a ratio's CI inverts depends on the rows (paired rounds or not): ratio_note and the
# methods note say it; the marks read the same either way.
MARK_HELP = ("Verdicts, read from the ratio's CI (at 95 % raised for a Benjamini-Hochberg correction across the "
             "table, false discovery rate 5 %; an index ratio: bootstrap 95 % CI): equivalent = the whole CI lies "
             "within the equivalence margin of 1 (default ±2 %; --margin, suite key margin); faster / slower = "
             "otherwise the CI excludes 1 (for a time metric a ratio above 1 is slower); inconclusive = neither, "
             "with the smallest difference the run could have seen (could not see < x %), or n too small = these "
             "repetitions cannot reach the CI's level; = = the baseline itself")


# Two runs' repetitions are not paired: compare's B / A is a ratio of medians (analysis.compare).
COMPARE_HELP = ("B / A = run B's median / run A's median, its CI the exact Mann-Whitney test on log values, "
                "inverted (Hodges-Lehmann; the two runs' repetitions are not paired). " + MARK_HELP)


def ratio_note(rows: list[dict], baseline: str, where: str = "") -> str:
    """A results table's note: how its ratios were computed (from its rows), then the marks."""
    return f"{ratio_phrase(rows, baseline=baseline)}{where}. {MARK_HELP}."


def value(v: float | None) -> str:
    return num(v)


def ratio(v: float | None) -> str:
    # Three decimals, as the terminal table prints ratios.
    return "-" if v is None else f"{v:.3f}"


def p_value(p: float | None) -> str:
    return "-" if p is None else (f"{p:.2g}" if p >= 1e-4 else "<1e-4")


def mark(row: dict, baseline: str | None = None) -> str:
    """The verdict of a result row, worded as the terminal's (render.mark): '=' for the baseline,
    faster / slower / equivalent / 'inconclusive (could not see < 9 %)', '' without a ratio."""
    if baseline is not None and row.get("environment") == baseline and row.get("n"):
        return "="
    if row.get("ratio") is None:
        return ""
    return verdict_mark(row)


def levels(row: dict) -> str:
    """The CI levels of a row where they are not what the table states: a median's below 95 % (n too
    small for 95 %), a ratio's below its table's corrected level, or a ratio interval with no level."""
    out = []
    for key, what in (("ci_level", "median CI"), ("ci_level_a", "A's median CI"), ("ci_level_b", "B's median CI")):
        if row.get(key) is not None and row[key] < 0.95 - 1e-9:  # compare's rows have one per run
            n = row.get({"ci_level": "n", "ci_level_a": "n_a", "ci_level_b": "n_b"}[key])
            out.append(f"{what} {row[key] * 100:.3g} % (n={n})")
    if row.get("verdict") and row.get("ratio_ci_low") is not None:
        own, stated = row.get("ratio_ci_level"), (1 - row["p_threshold"]) if row.get("p_threshold") else 0.95
        if own is None:
            out.append("ratio CI: no level (n too small)")
        elif own < stated - 5e-4:
            out.append(f"ratio CI {own * 100:.3g} %")
    return "; ".join(out)


def level(v: float | None) -> str:
    """A CI's level as a table cell: '95 %', '90 %', '-' when there is none."""
    return "-" if v is None else f"{v * 100:.3g} %"


def when(epoch: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S") if epoch else "-"


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.1f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec} s" if m < 120 else f"{m // 60} h {m % 60} min"
