"""Instance start-up phases from the lifecycle timestamps every driver records
(requested -> created -> running -> init -> ready): the seeds' boot-time figure, per instance.

Shown only when some instance took measurable time to start (the host starts instantly).
The boot-time workload (concurrency x image size grid) will add its own section on top of this.
"""

from __future__ import annotations

from .. import svg
from ..data import RunData
from ..model import Chart, Section, Table
from .common import slug

PHASES = ["requested", "created", "running", "init", "ready"]
MIN_SECONDS = 0.05  # below this the phases are bookkeeping, not a start-up worth drawing


def _offsets(lc: dict) -> list[float | None]:
    t0 = lc.get("requested")
    return [None if t0 is None or lc.get(p) is None else lc[p] - t0 for p in PHASES]


def _segments(offs: list[float | None]) -> list[float | None]:
    """Phase lengths; a phase the driver did not record is skipped, the next one spans the gap."""
    out, prev = [], 0.0
    for o in offs[1:]:
        out.append(None if o is None else max(o - prev, 0.0))
        prev = prev if o is None else o
    return out


def build(data: RunData) -> Section | None:
    insts = [i for i in data.instances if (_offsets(i["lifecycle"])[-1] or 0) >= MIN_SECONDS]
    if not insts:
        return None
    labels = [f"{i['name']} ({i['environment']})" for i in insts]
    offsets = [_offsets(i["lifecycle"]) for i in insts]

    segments = [f"to {p}" for p in PHASES[1:]]
    lengths = [_segments(offs) for offs in offsets]

    def draw(uid: str) -> str:
        return svg.stacked(uid, "Instance start-up phases", labels, segments, lengths,
                           "seconds since the instance was requested")

    cells = [[labels[j], insts[j]["role"], *[("-" if o is None else f"{o:.3f}") for o in offsets[j][1:]]]
             for j in range(len(insts))]
    table = Table("Instance start-up phases (seconds after the request)", ["instance", "role", *PHASES[1:]],
                  cells, numeric={2, 3, 4, 5})
    section = Section(slug(data.id, "lifecycle"), "Instance start-up", intro=(
        "When each instance reached each phase of its start-up, from the driver's timestamps."))
    section.blocks.append(Chart(slug(data.id, "lifecycle-chart"), "Instance start-up phases",
                                "Stacked horizontal bars per instance: one hatched segment per phase, "
                                "labelled in the legend; the total is printed at the bar's end.",
                                draw, table))
    return section

