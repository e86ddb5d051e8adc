"""Pieces every section uses: result tables, labels, ids."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from .. import fmt
from ..model import Table

RESULT_COLUMNS = ["environment", "n", "median", "CI low", "CI high", "unit", "ratio", "ratio CI low",
                  "ratio CI high", "p", "verdict", "notes"]


def slug(*parts: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(str(p) for p in parts).lower()).strip("-")


def describe(params: dict, condition: dict, hide: Iterable[str] = ()) -> str:
    """'copies=1 · delay_ms=10': what distinguishes one group of results from another."""
    hide = set(hide)
    bits = [f"{k}={v}" for k, v in params.items() if k not in hide]
    bits += [f"{k}={v}" for k, v in condition.items()]
    return " · ".join(bits)


NOTE_CHARS = 200  # a table cell is no place for a whole error log; the header lists failures in full


def row_notes(row: dict) -> str:
    # Each warning without its advice (the header's warning table has it in full).
    short = [x for x in [fmt.levels(row)] if x] + [w.split("; ")[0] for w in row.get("warnings") or []]
    text = f"skipped: {row['skipped']}" if row.get("skipped") else "; ".join(short)
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 1] + "…"


def result_cells(row: dict, baseline: str) -> list[str]:
    """One analysis.results() row as table cells, in RESULT_COLUMNS order."""
    if not row["n"]:
        what = f"skipped: {row['skipped']}" if row.get("skipped") else (
            f"failed ({row['failures']})" if row["failures"] else "no samples")
        return [row["environment"], "0", what, "-", "-", row["unit"], "-", "-", "-", "-", "", row_notes(row)]
    return [row["environment"], str(row["n"]), fmt.value(row["median"]), fmt.value(row["ci_low"]),
            fmt.value(row["ci_high"]), row["unit"], fmt.ratio(row["ratio"]), fmt.ratio(row["ratio_ci_low"]),
            fmt.ratio(row["ratio_ci_high"]), fmt.p_value(row["p_value"]), fmt.mark(row, baseline), row_notes(row)]


def result_table(caption: str, rows: list[dict], baseline: str, label: Callable[[dict], list[str]],
                 label_columns: list[str], note: str = "") -> Table:
    cells, keys = [], []
    for r in rows:
        cells.append(label(r) + result_cells(r, baseline))
        keys.append({"cell": r["cell_key"], "metric": r["metric"], "env": r["environment"]})
    k = len(label_columns)
    return Table(caption, label_columns + RESULT_COLUMNS, cells, keys,
                 numeric={k + i for i in (1, 2, 3, 4, 6, 7, 8, 9)},
                 note=note or fmt.ratio_note(rows, baseline))


def versus(others: list[str], baseline: str) -> str:
    """Axis wording: with one bar per group the bars carry no environment name, so the axis says it."""
    return f"{others[0]} / {baseline}" if len(others) == 1 else f"to {baseline}"


def finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)
