"""Number formatting shared by every report output, so HTML, Markdown and the terminal agree.

Tests format analysis.results() with these same functions and compare strings.
"""

from __future__ import annotations

import datetime as dt

from ..ratio_methods import ratio_phrase
from ..render import num

__all__ = ["num", "value", "ratio", "p_value", "mark", "levels", "when", "seconds", "MARK_HELP",
           "COMPARE_HELP", "ratio_note"]

# Which test a ratio's CI inverts depends on the rows (paired rounds or not): ratio_note and the
# methods note say it; the marks read the same either way.
MARK_HELP = ("* = significant: the ratio's CI excludes 1 (at 95 % raised for a Benjamini-Hochberg correction "
             "across the table, false discovery rate 5 %; an index ratio: bootstrap 95 % CI); ~ = not "
             "significant: the CI includes 1; n too small = these repetitions cannot reach the table's level, no "
             "verdict; = = the baseline itself")


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
    """The significance mark of a result row: '=' for the baseline, '*' significant, '~' not, '' no ratio."""
    if baseline is not None and row.get("environment") == baseline and row.get("n"):
        return "="
    if row.get("ratio") is None:
        return ""
    if row.get("verdict") == "n too small":
        return "n too small"
    return "*" if row.get("significant") else "~"


def levels(row: dict) -> str:
    """The CI levels of a row when below 95 % (n too small for 95 %), else ''."""
    out = []
    if row.get("ci_level") is not None and row["ci_level"] < 0.95 - 1e-9:
        out.append(f"median CI {row['ci_level'] * 100:.3g} % (n={row['n']})")
    if row.get("verdict") == "n too small" and row.get("ratio_ci_level") is not None:
        out.append(f"ratio CI {row['ratio_ci_level'] * 100:.3g} %")
    return "; ".join(out)


def when(epoch: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S") if epoch else "-"


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.1f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec} s" if m < 120 else f"{m // 60} h {m % 60} min"
