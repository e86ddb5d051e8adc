"""Boot-time grid (study 000 item 2, `virtbench boot`): per image mode and shape, the grid of image
size x concurrency as a table, the start-up phases of every cell as stacked bars (medians), and the
study's Table 6/7 beside ours where the run maps its image sizes to the published ones."""

from __future__ import annotations

import json
import re
from collections import defaultdict

from ...studies import published
from ...drivers import traits_of
from .. import fmt, svg
from ..data import RunData
from ..model import Chart, Note, Section, Table
from .study import published_table, sid

PHASES = ("created", "running", "init", "ready")
METRICS = PHASES + ("teardown",)
STUDY = ("000", "Instance boot time (run-instances to 'running'), mean of 5")


def _size_key(size: str) -> tuple:
    m = re.fullmatch(r"([\d.]+)\s*([KMGT]?)i?B?", str(size), re.IGNORECASE)
    if not m:
        return (1, str(size))
    return (0, float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2).upper()])


def build(data: RunData, rows: list[dict]) -> Section:
    section = Section(sid(data, "boot"), "Boot time (study 000)", intro=(
        "Seconds from the request to each phase of an instance's start-up (created, running, init, ready = a "
        "command ran inside), per image size and number of instances started at once, with CIs of the "
        "medians (95 %, or the lower level fewer than 6 starts allow, printed beside them); teardown is its own duration. Failed starts are counted, as the study did."))
    cells: dict[str, dict[str, dict]] = defaultdict(dict)  # cell key -> metric -> row (one environment)
    for r in rows:
        cells[r["cell_key"]][r["metric"]] = r
    panels: dict[str, list[str]] = defaultdict(list)
    for key, by in cells.items():
        p = _p(by)
        panels[json.dumps([p["image_mode"], p["shape"]])].append(key)
    for panel, keys in panels.items():
        mode, shape = json.loads(panel)
        keys.sort(key=lambda k: (_size_key(_p(cells[k])["image_size"]), _p(cells[k])["concurrency"]))
        section.blocks += _panel(data, f"image mode {mode}, shape {shape}", [cells[k] for k in keys])
    section.blocks += _beside_study(data, cells)
    return section


def _p(by: dict) -> dict:
    """A cell's grid parameters (defaults where a row lacks one, so no row can break the section)."""
    return {"image_size": "?", "concurrency": 1, "image_mode": "?", "shape": "?", **next(iter(by.values()))["params"]}


def _failures(by: dict) -> int:
    return max((r["failures"] or 0) for r in by.values())


def _panel(data: RunData, title: str, grid: list[dict]) -> list:
    sizes = list(dict.fromkeys(_p(by)["image_size"] for by in grid))
    concs = sorted({_p(by)["concurrency"] for by in grid})
    at = {(_p(by)["image_size"], _p(by)["concurrency"]): by for by in grid}
    notes = (data.run["spec"].get("boot") or {}).get("size_notes") or {}

    def ready(size, conc) -> str:
        by = at.get((size, conc))
        if by is None:
            return "-"
        r, fails = by.get("ready"), _failures(by)
        if r is None or not r["n"]:
            skipped = next((x.get("skipped") for x in by.values() if x.get("skipped")), None)
            return f"skipped: {skipped}" if skipped else f"fail ({fails} failed)"
        text = f"{fmt.value(r['median'])} [{fmt.value(r['ci_low'])}-{fmt.value(r['ci_high'])}]"
        if r.get("ci_level") is not None and r["ci_level"] < 0.95 - 1e-9:  # n too small for 95 %: its own level
            text += f" {r['ci_level'] * 100:.3g} %"
        return text + (f", {fails} failed" if fails else "")

    grid_table = Table(f"Boot grid, {title}: seconds to ready, median [CI: 95 % unless another level is printed]",
                       ["image size", *[f"{c} at once" for c in concs]],
                       [[s + (f" ({notes[s]})" if s in notes else ""), *[ready(s, c) for c in concs]] for s in sizes],
                       numeric=set(range(1, len(concs) + 1)),
                       note="Rows: image size; columns: instances started at the same moment. 'failed' counts starts "
                            "that never became ready. An interval from fewer than 6 starts is [min-max] at its own "
                            "lower level, printed beside it.")
    labels, lengths, cells, keys = [], [], [], []
    for by in grid:
        p = _p(by)
        label = f"{p['image_size']} x{p['concurrency']}"
        meds = [by[m]["median"] if m in by and by[m]["n"] else None for m in PHASES]
        if any(v is not None for v in meds):
            labels.append(label)
            lengths.append(_segments(meds))
        for m in (*METRICS, "(none)"):
            r = by.get(m)
            if r is None:
                continue
            if not r["n"]:  # a cell that was skipped, or whose every start failed
                what = f"skipped: {r['skipped']}" if r.get("skipped") else f"every start failed ({r['failures']})"
                cells.append([p["image_size"], str(p["concurrency"]), m, "0", what, "-", "-", "-", str(r["failures"])])
            else:
                cells.append([p["image_size"], str(p["concurrency"]), m, str(r["n"]), fmt.value(r["median"]),
                              fmt.value(r["ci_low"]), fmt.value(r["ci_high"]), fmt.value(r["mean"]),
                              str(r["failures"])])
            keys.append({"cell": r["cell_key"], "metric": m, "env": r["environment"]})
    phase_table = Table(f"Boot phases, {title} (seconds; teardown = its duration)",
                        ["image size", "at once", "phase", "n", "median", "CI low", "CI high", "mean", "failed"],
                        cells, keys, numeric={1, 3, 4, 5, 6, 7, 8})
    blocks: list = [grid_table]
    if labels:
        segs = ["to created", "created to running", "running to init", "init to ready"]
        chart_title = f"Boot phases, {title}"
        blocks.append(Chart(sid(data, "boot", title), chart_title,
                            "Stacked horizontal bars, one per image size and number started at once: each hatched "
                            "segment is one phase (median seconds), named in the legend; the bar ends at the median "
                            "time to ready, printed at its end.",
                            lambda uid: svg.stacked(uid, chart_title, labels, segs, lengths,
                                                    "seconds since the request (medians)"), phase_table))
    else:
        blocks += [Note(f"{title}: no instance became ready, so there are no phases to draw.", "warn"), phase_table]
    return blocks


def _segments(medians: list[float | None]) -> list[float | None]:
    """Phase lengths from median offsets; a phase reached before the previous one (init before running, as a
    container's init can be) counts as 0, the next one spans from the latest offset so far."""
    out, prev = [], 0.0
    for o in medians:
        out.append(None if o is None else max(o - prev, 0.0))
        prev = prev if o is None else max(prev, o)
    return out


def _beside_study(data: RunData, cells: dict[str, dict[str, dict]]) -> list:
    pub = published.table(*STUDY)
    boot = data.run["spec"].get("boot") or {}
    notes = boot.get("size_notes") or {}
    driver = boot.get("driver") or next((data.env(e)["driver"] for e in data.env_order), "?")
    ours_vm = traits_of(driver).hypervisor_guest  # booted a kernel of its own, as the study's Xen VMs
    mapped: dict[float, str] = {}
    for ours, note in notes.items():
        m = re.search(r"published ([\d.]+) GB", note)
        if m:
            mapped[float(m.group(1))] = ours
    if not mapped:
        return [published_table(pub), Note(
            "This run's image sizes are not mapped to the study's (a boot suite such as suites/nii-boot.toml maps "
            "each published size to a scaled one), so the study's table is shown as printed, without ours beside it.")]
    at = {(_p(by)["image_size"], _p(by)["concurrency"], _p(by)["image_mode"]): by for by in cells.values()}
    modes = list(dict.fromkeys(k[2] for k in at))
    versions = list(dict.fromkeys(c.split(":")[0] for c in pub.columns))
    rows_out, keys = [], []
    for row in pub.rows:
        gb = float(row.split()[0])
        ours = mapped.get(gb)
        for conc in (1, 4, 8):
            pubs = [pub.value(row, f"{v}: {conc}") for v in versions]
            for mode in modes:
                by = at.get((ours, conc, mode)) if ours else None
                run_r, ready_r = (by or {}).get("running"), (by or {}).get("ready")
                skipped = next((x.get("skipped") for x in (by or {}).values() if x.get("skipped")), None)
                if by is None:
                    ours_cells = ["-", "not run", "-", "-", "-"]
                elif skipped:
                    ours_cells = [ours, mode, f"skipped: {skipped}", "-", "-"]
                elif run_r is None or not run_r["n"]:
                    ours_cells = [ours, mode, "fail", "-", str(_failures(by))]
                else:
                    ours_cells = [ours, mode, fmt.value(run_r["mean"]), fmt.value(ready_r["mean"]) if ready_r and
                                  ready_r["n"] else "-", str(_failures(by))]
                s = (published.scale_factor(run_r["mean"], pubs[-1])
                     if by is not None and run_r is not None and run_r["n"] and ours_vm else None)
                rows_out.append([row, str(conc), *("fail" if v is None else f"{v:g}" for v in pubs), *ours_cells,
                                 fmt.value(s)])
                keys.append({"cell": run_r["cell_key"], "metric": "running", "env": run_r["environment"]}
                            if run_r is not None and run_r["n"] else {})
    scaled = ", ".join(f"{k}: {v}" for k, v in notes.items())
    why = ("" if ours_vm else f" Our driver is '{driver}': the study timed Xen VMs, so no scale factor is "
           "stated (the times are not the same quantity).")
    return [Table(f"Published beside ours: {pub.cite()}",
                  ["published size", "at once", *[f"published {v} [s]" for v in versions], "our size", "our mode",
                   "our mean to running [s]", "our mean to ready [s]", "our failed starts", "scale factor s"],
                  rows_out, keys, numeric={1, 2, 3, 6, 7, 8, 9},
                  note=f"{pub.notes} Our image sizes are the published ones scaled ({scaled}). "
                       "Ours are means, as the study's. Scale factor s = our mean to running / the study's Eucalyptus "
                       f"{versions[-1]} figure for the same size and concurrency; published x s places a published "
                       f"figure on our scale.{why}")]
