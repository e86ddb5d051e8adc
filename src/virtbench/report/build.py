"""Stored runs -> a Document: for each run, its header and a section per workload family."""

from __future__ import annotations

import time

from ..errors import UserError
from ..store import Store
from . import header, reproduce, sections
from ..stats.ratio_methods import ratio_phrase
from .fmt import MARK_HELP
from .data import RunData, load
from .model import Document, Note, Part, Section


def legend(rows: list[dict]) -> str:
    """The document's key; the ratio's part names the method these runs' ratios used."""
    return ("Medians with 95 % confidence intervals (CI) from order statistics (distribution-free; with fewer "
            "than 6 repetitions [min, max] at its lower level, given in the notes); " + ratio_phrase(rows) + ". "
            + MARK_HELP + ". Every chart is followed by its data as a table.")


def part_for(data: RunData) -> Part:
    head = [header.build(data)]
    body = sections.workload_sections(data) + sections.run_sections(data)
    if not body and data.sample_count == 0:
        # Say what is missing rather than leave an empty page.
        head.append(Section(f"{data.id}-empty", "Results", blocks=[Note(
            "No results: this run stored no samples, so there is nothing to draw. "
            "The warnings above say why (failures, skips, or an interrupted run).", "warn")]))
    return Part(data.id, f"Run {data.id} · {data.run['suite_name'] or ''}".rstrip(" ·"), head + body)


def document(store: Store, run_ids: list[str], margin: float | None = None) -> Document:
    if not run_ids:
        raise UserError("no run id given", f"list runs with: virtbench runs{store.db_option}")
    datas = [load(store, rid, margin) for rid in run_ids]
    seen = [d.id for d in datas]
    if len(set(seen)) != len(seen):
        raise UserError("the same run is given twice: " + ", ".join(sorted({i for i in seen if seen.count(i) > 1})))
    title = f"virtbench report: run {seen[0]}" if len(seen) == 1 else f"virtbench report: {len(seen)} runs"
    parts: list[Part] = []
    rows: list[dict] = []
    for d in datas:
        if reproduce.is_reproduce(d.run):  # its scorecard first, then the run of each experiment
            head, children = reproduce.part(store, d.id)
            loaded = [load(store, c, margin) for c in children]
            parts += [head] + [part_for(c) for c in loaded]
            rows += [r for c in loaded for r in c.results["results"]]
        else:
            parts.append(part_for(d))
            rows += d.results["results"]
    return Document(title, time.time(), parts, legend=legend(rows))
