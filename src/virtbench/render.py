"""Terminal output: result tables with CIs, run lists, comparisons (rich)."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from .stats.ratio_methods import BOOTSTRAP, kinds, ratio_phrase


def verdict_help(margin: float | None = None) -> str:
    """What the four verdicts mean (every legend uses this)."""
    m = f"±{margin * 100:g} %" if margin else "the margin"
    return (f"equivalent = the whole CI lies within {m} of 1 (--margin, suite key margin); faster / slower = "
            "otherwise the CI excludes 1 (for a time metric a ratio above 1 is slower, for a throughput metric "
            "faster); inconclusive = neither: it could not see a difference smaller than the one printed "
            "(the CI's farther bound), or 'n too small' = these repetitions cannot reach the CI's level")


def legend(rows: list[dict], baseline: str = "baseline", margin: float | None = None) -> str:
    """The key under a run's tables; the ratio's part says how these rows' ratios were computed."""
    return ("median [95% CI: order statistics, distribution-free; the real level is printed where n is too small "
            f"for 95%]; {ratio_phrase(rows, baseline=baseline)}, at the level printed in its column: 95% raised for a "
            "Benjamini-Hochberg correction across the table (false discovery rate 5%), a row's own lower level "
            f"printed beside it; {verdict_help(margin)}; † = max_repetitions reached before ci_target; index: CI "
            "from its tests' order-statistic bounds, index ratio: bootstrap 95% CI (no level claimed below 4 "
            "repetitions a side)")


def compare_legend(rows: list[dict], margin: float | None = None) -> str:
    """The key under `compare`: two runs' repetitions are not paired, so B / A is a ratio of medians."""
    boot = "; a percentile bootstrap where values are not positive" if BOOTSTRAP in kinds(rows) else ""
    return ("median [95% CI: order statistics, distribution-free; the real level is printed where n is too small]; "
            "B / A = B's median / A's median (two runs' repetitions are not paired), its CI the exact Mann-Whitney "
            f"test on log values, inverted (Hodges-Lehmann){boot}, at 95% raised for a Benjamini-Hochberg correction "
            f"across each table (false discovery rate 5%), a row's own lower level printed beside it; "
            f"{verdict_help(margin)}")


def num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _ci(lo: float | None, hi: float | None, digits: int = 4) -> str:
    return f"[{num(lo, digits)}, {num(hi, digits)}]" if lo is not None and hi is not None else "[-]"


def _requested(key: str) -> bool:
    """A condition key the suite asked for (storage, delay_ms ...), not one a condition reported."""
    from .conditions import REGISTRY
    return key in REGISTRY


def _group_title(row: dict[str, Any], hide: set[str]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in row["params"].items() if k not in hide)
    cond = ", ".join(f"{k}={v}" for k, v in row["condition"].items() if _requested(k))
    return " · ".join(x for x in (row["workload"], params, cond) if x)


def _measured_caption(rows: list[dict], envs: list[str]) -> str:
    """What the conditions reported (file system, mechanism, measured delay), once when every
    environment agrees, else per environment; they differ by environment, so they are not in the title."""
    per_env: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["n"]:
            got = per_env.setdefault(row["environment"], {})
            for k, v in row["condition"].items():
                if not _requested(k):
                    got.setdefault(k, v)
    keys = list(dict.fromkeys(k for e in envs for k in per_env.get(e, {})))
    common, own = [], defaultdict(list)
    for k in keys:
        vals = {e: per_env[e][k] for e in envs if k in per_env.get(e, {})}
        if len(vals) == len(per_env) and len({json.dumps(v) for v in vals.values()}) == 1:
            common.append(f"{k}={next(iter(vals.values()))}")
        else:
            for e, v in vals.items():
                own[e].append(f"{k}={v}")
    lines = [", ".join(common)] if common else []
    lines += [f"{e}: {', '.join(own[e])}" for e in envs if own.get(e)]
    return "\n".join(lines)


def results_tables(console: Console, data: dict[str, Any], db_option: str = "") -> None:
    """One table per (workload, params except the per-row test, condition); one row per metric.
    db_option: the --db the hints repeat (`Store.db_option`)."""
    envs, baseline = data["environments"], data["baseline"]
    groups: dict[str, list[dict]] = defaultdict(list)
    monitor_rows = [r for r in data["results"] if r["metadata"].get("monitor")]
    # an environment without samples of a monitor metric (host sampler, skipped) has a bare row
    monitor_metrics = {(r["workload"], r["metric"]) for r in monitor_rows}
    for row in data["results"]:
        if row["metadata"].get("monitor") or (row["workload"], row["metric"]) in monitor_metrics:
            continue
        hide = {"test"} if "test" in row["params"] else set()
        groups[_group_title(row, hide)].append(row)
    load = data.get("machine_load") or {}
    if load.get("busy"):
        console.print(f"[yellow]{load['note']}[/yellow]", highlight=False)
    for title, rows in groups.items():
        table = Table(title=title, title_justify="left", header_style="bold",
                      caption=_measured_caption(rows, envs) or None, caption_justify="left")
        table.add_column("metric")
        table.add_column("unit")
        for env in envs:
            table.add_column(f"{env}{' (baseline)' if env == baseline else ''}", justify="right")
        level = _table_level(rows)
        for env in envs:
            if env != baseline:
                table.add_column(f"{env} / {baseline}" + (f" ({_pct(level)} CI)" if level else ""), justify="right")
        by_metric: dict[str, dict[str, dict]] = defaultdict(dict)
        for row in rows:
            by_metric[_row_label(row)][row["environment"]] = row
        for metric, cells in by_metric.items():
            line = [metric, next((c["unit"] for c in cells.values() if c["unit"]), "")]
            for env in envs:
                r = cells.get(env)
                line.append(_value_cell(r))
            for env in envs:
                if env == baseline:
                    continue
                line.append(_ratio_cell(cells.get(env), level))
            table.add_row(*line, style="bold" if metric == "index" else None)
        console.print(table)
    shown = [r for rows in groups.values() for r in rows]  # the monitor's rows are not in these tables
    console.print(f"[dim]{legend(shown, data.get('baseline') or 'baseline', data.get('margin'))}[/dim]",
                  highlight=False)
    if monitor_rows:
        metrics = sorted({r["metric"] for r in monitor_rows})
        console.print(f"[dim]resource use while running ({len(metrics)} monitor metrics: "
                      f"{', '.join(metrics[:6])}{' ...' if len(metrics) > 6 else ''}) is in --json and "
                      f"`virtbench report`[/dim]", highlight=False)
    print_warnings(console, data)
    failed_cells(console, data, db_option)


def _row_label(row: dict[str, Any]) -> str:
    """A table row's name: its metric; a cell without any ("(none)": every repetition failed, or
    skipped) is named by the per-row parameter the table's title leaves out (test=pipe -> pipe), so
    two such cells are two rows, each with its name."""
    if row["metric"] != "(none)" or "test" not in row["params"]:
        return row["metric"]
    return f"{row['params']['test']} (no result)"


def _value_cell(r: dict | None) -> str:
    if r is None or r["n"] == 0:
        if r and r.get("skipped") and not r["failures"]:
            return "[yellow]skipped[/yellow]"
        return f"[red]failed ({r['failures']})[/red]" if r and r["failures"] else "-"
    text = f"{num(r['median'])} {_ci(r['ci_low'], r['ci_high'])}{median_level(r.get('ci_level'))}"
    index = r["metadata"].get("index")
    if index is not None:
        text += f" (idx {num(index, 4)})"
    if r["failures"]:
        text += f" [red]+{r['failures']} failed[/red]"
    return text + f" n={r['n']}"


def _pct(level: float) -> str:
    return f"{level * 100:.3g}%"


def median_level(level: float | None) -> str:
    """' 75%' after a median's CI whose level is below 95 % (n too small for 95 %), else ''."""
    return f" {_pct(level)}" if level is not None and level < 0.95 - 1e-9 else ""


def _table_level(rows: list[dict]) -> float | None:
    """The corrected level of a table's ratio CIs (1 - the Benjamini-Hochberg threshold)."""
    levels = {round(1 - r["p_threshold"], 6) for r in rows if r.get("p_threshold") is not None}
    return levels.pop() if len(levels) == 1 else None


def _ratio_cell(r: dict | None, level: float | None = None) -> str:
    if r is None or r["ratio"] is None:
        return "-"
    text = f"{r['ratio']:.3f} {_ci(r['ratio_ci_low'], r['ratio_ci_high'], 3)}"
    own = r.get("ratio_ci_level")
    if r.get("verdict") and r["ratio_ci_low"] is not None and (own is None or own < (level or 0.95) - 5e-4):
        text += f" {_pct(own)}" if own is not None else " (no level)"  # never under the column's level
    return text + " " + mark(r) + (" †" if r.get("ci_target_met") is False else "")


def pct(fraction: float) -> str:
    """0.09 -> '9 %', 0.0123 -> '1.2 %', 0.153 -> '15 %'."""
    x = fraction * 100
    return f"{x:.0f} %" if x >= 10 else f"{x:.2g} %"


def mark(r: dict) -> str:
    """A row's verdict as the tables print it: faster, slower, equivalent, 'inconclusive (could not
    see < 9 %)' or 'inconclusive (n too small)'; '' for a row without one (the baseline)."""
    v = r.get("verdict")
    if v != "inconclusive":
        return v or ""
    if r.get("verdict_reason"):
        return f"inconclusive ({r['verdict_reason']})"
    return f"inconclusive (could not see < {pct(r['detectable'])})" if r.get("detectable") is not None \
        else "inconclusive"


_CV = re.compile(r"coefficient of variation ([0-9.]+%)")
_FAILED = re.compile(r"^(\d+) failed repetition\(s\): (.*)$", re.S)


def differing(params: list[dict[str, Any]]) -> list[str]:
    """The parameter names whose values are not the same in all of `params` (in first-seen order)."""
    keys = list(dict.fromkeys(k for p in params for k in p))
    return [k for k in keys if len({json.dumps(p.get(k), sort_keys=True, default=str) for p in params}) > 1]


def _place(row: dict[str, Any], keys: list[str], with_workload: bool) -> str:
    shown = [f"{k}={row['params'][k]}" for k in keys
             if k in row["params"] and not (k == "test" and row["params"][k] == row["metric"])]
    head = (f"{row['workload']} " if with_workload else "") + f"{row['metric']}@{row['environment']}"
    return head + (f" ({', '.join(shown)})" if shown else "")


def _extent(extras: list[str]) -> str:
    """The span of the per-result figures of a warning every result has ("cv 6.1%" ... "cv 19.8%" ->
    ", cv 6.1%-19.8%"); nothing when there are none or they are not one kind of number."""
    found = [re.fullmatch(r"(\D*?)(\d+(?:\.\d+)?)(\D*)", e) for e in extras if e]
    if not found or not all(found) or len({(m.group(1), m.group(3)) for m in found}) != 1:
        return ""
    values = sorted(found, key=lambda m: float(m.group(2)))
    lo, hi = values[0], values[-1]
    return f", {lo.group(1)}{lo.group(2)}{lo.group(3)}" + (f"-{hi.group(2)}{hi.group(3)}" if hi.group(2) != lo.group(2) else "")


def print_warnings(console: Console, data: dict[str, Any]) -> None:
    """One line per kind of warning with the results it applies to, each named by the parameters
    that tell them apart (a suite's shared parameters would only repeat). Cells without any result
    are listed apart, by failed_cells()."""
    places: dict[str, list[tuple[dict, str]]] = defaultdict(list)
    for row in data["results"]:
        for w in row.get("warnings", []):
            cv, failed = _CV.search(w), _FAILED.match(w)
            if w.startswith("every repetition failed"):
                continue  # failed_cells() names these
            if w.startswith("noisy") and cv:
                places["noisy: coefficient of variation above 5 %; close other programs, pin the CPU "
                       "frequency, or add repetitions"].append((row, f"cv {cv.group(1)}"))
            elif failed:
                places[f"failed repetitions: {failed.group(2)}"].append((row, f"x{failed.group(1)}"))
            elif w.startswith("ci_target ") and "): " in w:  # analysis.TARGET_MISSED: the row's half-width apart
                kind, got = w.rsplit(": ", 1)
                places[kind].append((row, got))
            elif w.startswith("only "):
                places[w.split(":", 1)[0] + ": " + w.split(":", 1)[1].split(";", 1)[-1].strip()].append((row, ""))
            else:
                places[w].append((row, ""))
    notes = list(data.get("notes", []))
    if not places and not notes:
        return
    console.print("[yellow]warnings:[/yellow]")
    measured = [r for r in data["results"] if r.get("n", 1) and not r.get("metadata", {}).get("monitor")]
    for kind, where in places.items():
        rows = [r for r, _ in where]
        # told apart by what differs among all the run's results of these workloads, not only among
        # the warned ones: dhrystone@host (copies=1) when a copies=vcpus table exists too
        keys = differing([r["params"] for r in measured if r["workload"] in {w["workload"] for w in rows}])
        many = len({r["workload"] for r in rows}) > 1
        labels = list(dict.fromkeys(" ".join(x for x in (_place(r, keys, many), extra) if x) for r, extra in where))
        every = len(measured) > 1 and {id(r) for r in measured} <= {id(r) for r in rows}
        shown = (f"every result ({len(measured)}){_extent([extra for _, extra in where])}" if every else
                 "; ".join(labels[:6]) + (f"; and {len(labels) - 6} more" if len(labels) > 6 else ""))
        console.print(f"  [yellow]-[/yellow] {kind} — {shown}", highlight=False)
    for note in notes:
        console.print(f"  [yellow]-[/yellow] {note}", highlight=False)


def failed_cells(console: Console, data: dict[str, Any], db_option: str = "") -> None:
    """The cells without results, each with the first line of its reason (after the tables, so the
    last thing a run prints says what did not work)."""
    outcome = data.get("outcome") or {}
    missing = outcome.get("failed", []) + outcome.get("not_run", [])
    if not missing:
        return
    total = outcome["cells"] - outcome.get("skipped", 0)
    console.print(f"[red]{len(missing)} of {total} cell(s) have no results:[/red]", highlight=False)
    by_workload: dict[str, list[dict]] = defaultdict(list)
    for c in data.get("results", []):  # which parameters tell a workload's cells apart in this run
        by_workload[c["workload"]].append(c["params"])
    for e in missing:
        keys = [k for k in differing(by_workload.get(e["workload"], []) + [e["params"]]) if k != "duration"]
        params = " ".join(f"{k}={e['params'][k]}" for k in keys if k in e["params"])
        cond = " ".join(f"{k}={v}" for k, v in (e.get("condition") or {}).items())
        what = " ".join(x for x in (e["workload"], params, cond) if x)
        tries = f" ({e['failures']} failed)" if e.get("failures") else ""
        reason = e["reason"]
        if not e.get("attempts") and not e.get("failures") and data.get("status") != "completed":
            reason = f"not reached: the run is {data.get('status')} (virtbench run --resume {data.get('run_id')}{db_option})"
        console.print(f"  [red]-[/red] {what} @ {e['environment']}{tries}: {reason}", highlight=False)


def runs_table(console: Console, runs: list[dict[str, Any]]) -> None:
    table = Table(header_style="bold")
    for col in ("run id", "started", "took", "status", "suite", "baseline", "samples", "failures"):
        table.add_column(col, no_wrap=col in ("run id", "started"))
    for r in runs:
        took = f"{r['finished_at'] - r['created_at']:.0f} s" if r["finished_at"] else "-"
        table.add_row(r["id"], when(r["created_at"]), took, run_status(r), r["suite_name"] or "",
                      r["baseline"] or "", str(r["samples"]), str(r["failures"]))
    console.print(table)


def run_status(r: dict[str, Any]) -> str:
    """A stored run's status as `runs` lists it: a completed run says what it lacks (its note, set
    at its end)."""
    return f"completed: {r['note']}" if r["status"] == "completed" and r.get("note") else r["status"]


def compare_table(console: Console, data: dict[str, Any]) -> None:
    table = Table(title=f"{data['run_b']} against {data['run_a']}", title_justify="left", header_style="bold")
    level = _table_level(data["results"])
    for col in ("workload", "params", "metric", "env", "A median", "B median",
                "B / A" + (f" ({_pct(level)} CI)" if level else ""), "verdict"):
        table.add_column(col, justify="right" if "median" in col or col.startswith("B / A") else "left")
    for r in data["results"]:
        own = r.get("ratio_ci_level")
        lower = own is not None and r["ratio_ci_low"] is not None and own < (level or 0.95) - 5e-4
        table.add_row(r["workload"], json.dumps(r["params"], sort_keys=True), r["metric"], r["environment"],
                      f"{num(r['median_a'])} {_ci(r['ci_low_a'], r['ci_high_a'])}{median_level(r.get('ci_level_a'))}",
                      f"{num(r['median_b'])} {_ci(r['ci_low_b'], r['ci_high_b'])}{median_level(r.get('ci_level_b'))}",
                      f"{num(r['ratio'], 3)} {_ci(r['ratio_ci_low'], r['ratio_ci_high'], 3)}"
                      + (f" {_pct(own)}" if lower else ""), mark(r))
    console.print(table)
    console.print(f"[dim]{compare_legend(data['results'], data.get('margin'))}[/dim]", highlight=False)
    for side in ("only_in_a", "only_in_b"):
        if data[side]:
            console.print(f"{side.replace('_', ' ')}: {', '.join(data[side][:20])}")


def when(epoch: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S") if epoch else "-"


def hosts_table(console: Console, rows: list[dict[str, Any]]) -> None:
    """`virtbench hosts`: one row per inventory host (what the probe found, or why it could not)."""
    from rich.text import Text

    table = Table(header_style="bold")
    for col in ("host", "address", "reachable", "kernel", "cpu", "cores", "memory", "kvm", "podman", "mpi"):
        table.add_column(col, justify="right" if col in ("cores", "memory") else "left",
                         overflow="fold")
    for r in rows:  # cells are Text: ssh messages and CPU names may contain [brackets]
        if not r["reachable"]:
            table.add_row(Text(r["name"]), Text(r["address"]),
                          Text.assemble(("no", "red"), f": {r['reason']}"), *["-"] * 7)
            continue
        mem = f"{r['memory_mb'] / 1024:.1f} GiB" if r["memory_mb"] is not None else "-"
        cells = [r["kernel"], r["cpu_model"], str(r["cores"] or "-"), mem, r["kvm"], r["podman"],
                 f"Open MPI {r['mpi']}" if r["mpi"] else None]
        table.add_row(Text(r["name"]), Text(r["address"]), Text("yes", "green"), *(Text(c or "-") for c in cells))
    console.print(table)
    for r in rows:
        for note in r.get("notes") or []:
            console.print(f"{r['name']}: {note}", style="dim", highlight=False, markup=False)
