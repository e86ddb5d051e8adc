"""Number formatting shared by every report output, so HTML, Markdown and the terminal agree.

Tests format analysis.results() with these same functions and compare strings.
"""

from __future__ import annotations

import datetime as dt

from ..render import num

__all__ = ["num", "value", "ratio", "p_value", "mark", "when", "seconds", "MARK_HELP"]

MARK_HELP = ("* = significant (Mann-Whitney p < 0.05, or CI excluding 1 for an index); "
             "~ = not distinguishable from noise; = = the baseline itself")


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
    return "*" if row.get("significant") else "~"


def when(epoch: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S") if epoch else "-"


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.1f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec} s" if m < 120 else f"{m // 60} h {m % 60} min"
