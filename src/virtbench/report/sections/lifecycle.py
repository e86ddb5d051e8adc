"""Instance start-up phases from the lifecycle timestamps every driver records
(requested -> created -> running -> init -> ready): the seeds' boot-time figure, per instance.

Shown only when some instance took measurable time to start (the host starts instantly).
The boot-time workload (concurrency x image size grid) will add its own section on top of this.
"""

from __future__ import annotations

import math

from ...drivers.pods.phases import LIFECYCLE
from .. import svg
from ..data import RunData
from ..model import Chart, Section, Table
from .common import slug

PHASES = ["requested", "created", "running", "init", "ready"]
MIN_SECONDS = 0.05  # below this the phases are bookkeeping, not a start-up worth drawing
FINEST = 1e-3  # the table's milliseconds


def coarse(inst: dict) -> float | None:
    """The resolution of the phases a pod's own timestamps gave (created, running), when coarser than
    the table's milliseconds: the Kubernetes API's are whole seconds (pod_phase_resolution_s)."""
    res = (inst.get("metadata") or {}).get("pod_phase_resolution_s")
    return float(res) if res and res > FINEST else None


def digits(res: float | None) -> int:
    return 3 if res is None else max(0, -math.floor(math.log10(res)))


def _offsets(inst: dict) -> list[float | None]:
    lc, res = inst["lifecycle"], coarse(inst)
    t0 = lc.get("requested")
    out = [None if t0 is None or lc.get(p) is None else lc[p] - t0 for p in PHASES]
    if res:  # the API truncates to `res`: the time lies in [t, t + res); the nearest step to its middle
        out = [o if o is None or p not in LIFECYCLE else round((o + res / 2) / res) * res
               for p, o in zip(PHASES, out)]
    return out


def _segments(offs: list[float | None]) -> list[float | None]:
    """Phase lengths; a phase the driver did not record is skipped, the next one spans the gap."""
    out, prev = [], 0.0
    for o in offs[1:]:
        out.append(None if o is None else max(o - prev, 0.0))
        prev = prev if o is None else o
    return out


def build(data: RunData) -> Section | None:
    insts = [i for i in data.instances if (_offsets(i)[-1] or 0) >= MIN_SECONDS]
    if not insts:
        return None
    labels = [f"{i['name']} ({i['environment']})" for i in insts]
    offsets = [_offsets(i) for i in insts]
    res = [coarse(i) for i in insts]

    segments = [f"to {p}" for p in PHASES[1:]]
    lengths = [_segments(offs) for offs in offsets]

    def draw(uid: str) -> str:
        return svg.stacked(uid, "Instance start-up phases", labels, segments, lengths,
                           "seconds since the instance was requested", digits=[digits(r) for r in res])

    def text(o: float | None, phase: str, r: float | None) -> str:
        return "-" if o is None else f"{o:.{digits(r if phase in LIFECYCLE else None)}f}"

    cells = [[labels[j], insts[j]["role"], *[text(o, p, res[j]) for p, o in zip(PHASES[1:], offsets[j][1:])]]
             for j in range(len(insts))]
    shown = sorted({r for r in res if r})
    note = (f"Pods of the kubernetes backend: created and running are the API's timestamps (the pod's creation, "
            f"its container's start), which have {', '.join(f'{r:g} s' for r in shown)} resolution (truncated), "
            "so they are given to that resolution, to the nearest step, and are uncertain by that much; requested "
            "and ready are this machine's clock. The phases by the pod's own conditions follow below.") \
        if shown else ""
    table = Table("Instance start-up phases (seconds after the request)", ["instance", "role", *PHASES[1:]],
                  cells, numeric={2, 3, 4, 5}, note=note)
    section = Section(slug(data.id, "lifecycle"), "Instance start-up", intro=(
        "When each instance reached each phase of its start-up, from the driver's timestamps."))
    section.blocks.append(Chart(slug(data.id, "lifecycle-chart"), "Instance start-up phases",
                                "Stacked horizontal bars per instance: one hatched segment per phase, "
                                "labelled in the legend; the total is printed at the bar's end.",
                                draw, table))
    return section

