"""A stored boot run as results: every start's phases relative to its request, summaries per cell and
phase, the `virtbench boot --json` object, and its terminal tables (beside the published figures).
Apart from boot.py, which runs the grid: this half only reads the store."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .. import analysis, drivers
from ..errors import UserError
from ..store import Store

PHASES = ("created", "running", "init", "ssh_ready", "ready")  # ssh_ready: cloud instances
METRICS = PHASES + ("teardown",)
STATS = ("min", "median", "p90", "p95", "max", "mean")


def relative(lc: dict[str, float]) -> dict[str, float]:
    """Phase -> seconds after `requested`; teardown -> its own duration."""
    out = {}
    req = lc.get("requested")
    if req is None:
        return out
    for phase in PHASES:
        if phase in lc:
            out[phase] = lc[phase] - req
    if "teardown_start" in lc and "teardown_end" in lc:
        out["teardown"] = lc["teardown_end"] - lc["teardown_start"]
    return out


def summarize(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {k: None for k in STATS} | {"n": 0}
    a = np.asarray(values, dtype=float)
    return {"min": float(a.min()), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "p95": float(np.percentile(a, 95)), "max": float(a.max()), "mean": float(a.mean()), "n": int(a.size)}


def results(store: Store, run_id: str) -> dict[str, Any]:
    """The `virtbench boot --json` object for a stored boot run."""
    run = store.run(run_id)
    spec = run["spec"]
    if spec.get("kind") != "boot":
        raise UserError(f"run {run['id']} is not a boot run", f"show it with: virtbench show {run['id']}{store.db_option}")
    b = spec["boot"]
    attempts = store.attempts(run["id"])
    samples = store.samples(run["id"])
    by_cell: dict[str, dict[str, Any]] = {}
    for c in spec["cells"]:
        p = c["params"]
        by_cell[c["key"]] = {"driver": b["driver"], "concurrency": p["concurrency"], "image_size": p["image_size"],
                             "image_mode": p["image_mode"], "shape": p["shape"],
                             "size_note": b.get("size_notes", {}).get(p["image_size"]),
                             "phases": {}, "succeeded": 0, "failed": 0, "failures": [], "skipped": None,
                             "instances": []}
    values: dict[str, dict[str, list[float]]] = {k: {m: [] for m in METRICS} for k in by_cell}
    accels, backends = set(), set()
    for s in samples:
        values[s["cell_key"]][s["metric"]].append(s["value"])
    for a in attempts:
        cell = by_cell.get(a["cell_key"])
        if cell is None:
            continue
        if a["status"] == "skipped":
            cell["skipped"] = a["reason"]
            continue
        try:
            raw = json.loads(a["raw_output"] or "{}")
        except ValueError:
            raw = {}
        if a["status"] == "ok":
            cell["succeeded"] += 1
            if raw.get("accelerator"):
                accels.add(raw["accelerator"])
            if raw.get("backend"):
                backends.add(raw["backend"])
        else:
            cell["failed"] += 1
            cell["failures"].append(a["reason"] or "unknown")
        ts = raw.get("lifecycle") or {}
        cell["instances"].append({"attempt": a["repetition"], "round": raw.get("round"), "slot": raw.get("slot"),
                                  "instance": raw.get("instance"), "status": a["status"],
                                  "reason": a["reason"], "timestamps": ts, "seconds": relative(ts)})
    for key, cell in by_cell.items():
        cell["phases"] = {m: summarize(values[key][m]) for m in METRICS}
    out = {"run_id": run["id"], "status": run["status"], "driver": b["driver"], "name": spec.get("name"),
           "repeat": b["repeat"], "cells": list(by_cell.values()), "removals": analysis.removals(store, run["id"])}
    if drivers.traits_of(b["driver"]).hypervisor_guest:
        accel = sorted(accels)[0] if len(accels) == 1 else (",".join(sorted(accels)) or None)
        out["accelerator"] = accel
        if accel == "tcg":
            from ..drivers.vm.instance import TCG_NOTE

            out["accelerator_note"] = TCG_NOTE
    if backends:  # which backend produced the figures (cloud: the API's endpoint host, or moto)
        out["backend"] = ",".join(sorted(backends))
    if b.get("published"):
        out["published"] = b["published"]
    return out


def render(console, data: dict[str, Any]) -> None:
    from rich.table import Table

    from ..render import num

    head = f"boot run [bold]{data['run_id']}[/bold] ({data['status']}), driver {data['driver']}"
    if data.get("accelerator"):
        head += f", accelerator [bold]{data['accelerator']}[/bold]"
    if data.get("backend"):
        head += f", backend [bold]{data['backend']}[/bold]"
    console.print(head, highlight=False)
    if data.get("accelerator_note"):
        console.print(f"[yellow]{data['accelerator_note']}[/yellow]", highlight=False)
    table = Table(title=f"seconds from request, {data['repeat']} round(s) per cell; "
                        "median \\[min-max] p90 p95", title_justify="left", header_style="bold")
    # cloud instances have no observable init but a first SSH answer: show the phases that were seen
    middle = "ssh_ready" if any(c["phases"]["ssh_ready"]["n"] for c in data["cells"]) else "init"
    for col in ("shape", "size", "mode", "conc", "ok", "failed", "created", "running", middle, "ready",
                "ready p90 / p95", "teardown"):
        table.add_column(col, justify="right" if col not in ("shape", "mode", "size") else "left")
    for c in data["cells"]:
        if c["skipped"]:
            table.add_row(c["shape"], c["image_size"], c["image_mode"], str(c["concurrency"]), "-", "-",
                          f"[yellow]skipped: {c['skipped'][:80]}[/yellow]", "", "", "", "", "")
            continue
        ph = c["phases"]

        def med(m: str) -> str:
            s = ph[m]
            return "-" if s["n"] == 0 else f"{num(s['median'], 3)} [{num(s['min'], 3)}-{num(s['max'], 3)}]"

        ready = ph["ready"]
        table.add_row(c["shape"], c["image_size"], c["image_mode"], str(c["concurrency"]), str(c["succeeded"]),
                      f"[red]{c['failed']}[/red]" if c["failed"] else "0", med("created"), med("running"),
                      med(middle), med("ready"),
                      "-" if ready["n"] == 0 else f"{num(ready['p90'], 3)} / {num(ready['p95'], 3)}",
                      "-" if ph["teardown"]["n"] == 0 else num(ph["teardown"]["median"], 3))
    console.print(table)
    failures = [(c, f) for c in data["cells"] for f in c["failures"]]
    if failures:
        console.print(f"[red]{len(failures)} failed start(s):[/red]")
        for c, f in failures[:20]:
            console.print(f"  concurrency {c['concurrency']} size {c['image_size']} {c['image_mode']}: {f}",
                          highlight=False)
    notes = {c["image_size"]: c["size_note"] for c in data["cells"] if c.get("size_note")}
    for size, note in notes.items():
        console.print(f"[dim]size {size}: {note}[/dim]", highlight=False)
    if data.get("published"):
        _render_published(console, data)


def _render_published(console, data: dict[str, Any]) -> None:
    """The study's Table 6/7 (mean seconds to 'running') beside ours (mean running and ready)."""
    from rich.table import Table

    from ..render import num

    pub = data["published"]
    sizes = pub.get("sizes_gb", [])
    conc = pub.get("concurrency", [])
    mine: dict[tuple[str, int, str], dict] = {}
    for c in data["cells"]:
        mine[(c["image_size"], c["concurrency"], c["image_mode"])] = c
    our_sizes = list(dict.fromkeys(c["image_size"] for c in data["cells"]))
    modes = list(dict.fromkeys(c["image_mode"] for c in data["cells"]))
    for version, rows in pub.get("tables", {}).items():
        table = Table(title=f"published: {pub.get('title', '')} {version} (mean s to 'running') | ours: mean s "
                            "to running / ready", title_justify="left", header_style="bold")
        table.add_column("published size")
        for k in conc:
            table.add_column(f"{version} x{k}", justify="right")
        table.add_column("our size")
        for mode in modes:
            for k in conc:
                table.add_column(f"{mode} x{k}", justify="right")
        for i, gb in enumerate(sizes):
            row = [f"{gb:g} GB"] + [str(v) for v in rows.get(str(gb), rows.get(f"{gb:g}", []))]
            ours = our_sizes[i] if i < len(our_sizes) else "-"
            row.append(ours)
            for mode in modes:
                for k in conc:
                    c = mine.get((ours, k, mode))
                    if not c or c["skipped"]:
                        row.append("-")
                        continue
                    r, d = c["phases"]["running"], c["phases"]["ready"]
                    fail = f" ({c['failed']} failed)" if c["failed"] else ""
                    row.append("fail" if r["n"] == 0 else f"{num(r['mean'], 3)} / {num(d['mean'], 3)}{fail}")
            table.add_row(*row)
        console.print(table)
    if pub.get("note"):
        console.print(f"[dim]{pub['note']}[/dim]", highlight=False)
