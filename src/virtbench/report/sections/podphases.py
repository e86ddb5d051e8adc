"""Pod start-up by the pods' own account (drivers/pods/*_driver.py store `pod_phases` and `pod_events` with
their resolution): on a Kubernetes cluster the times its conditions became True (PodScheduled,
Initialized, ContainersReady, Ready), the container's start and the scheduler's and kubelet's events;
under podman kube play the sandbox's and the container's times.

Every figure is seconds after the pod's creation, printed at the resolution stored with it: the
Kubernetes API gives whole seconds (truncated), so a difference of two is uncertain by up to 1 s and
is never printed finer than that.
"""

from __future__ import annotations

import math

from ...drivers.pods.phases import CONDITIONS, timestamp
from ..data import RunData
from ..model import Section, Table
from .common import slug
from .lifecycle import digits

LABELS = {phase: ctype for ctype, phase in CONDITIONS} | {
    "sandbox_started": "sandbox started", "container_created": "container created",
    "container_started": "container started"}
ORDER = ["scheduled", "initialized", "sandbox_started", "container_created", "container_started",
         "containers_ready", "ready"]
_START = {r: k for k, r in enumerate(("Scheduled", "Pulling", "Pulled", "Created", "Started"))}


def _pods(data: RunData) -> list[dict]:
    return [i for i in data.instances if "created" in ((i.get("metadata") or {}).get("pod_phases") or {})]


def _resolution_text(res: float) -> str:
    return f"{res:g} s" if res >= 1e-3 else f"{res * 1e9:g} ns"


def _events(meta: dict, created: float, res: float) -> str:
    """'Scheduled 0, Pulling 1, Pulled 20, Started 20': each event's reason, seconds after creation."""
    out = []
    for e in meta.get("pod_events") or []:
        try:
            at = timestamp(e["at"]) if isinstance(e.get("at"), str) else float(e["at"])
        except (KeyError, TypeError, ValueError):
            continue
        if res >= 1:  # the scheduler's eventTime has microseconds, the rest whole seconds: cut all alike
            at = math.floor(at / res) * res
        out.append((at, f"{e.get('reason') or '?'} {at - created:.{min(digits(res), 3)}f}"))
    # events within one second: in the order a pod starts, others after them in the API's order
    return ", ".join(text for _, text in sorted(out, key=lambda e: (e[0], _START.get(e[1].split(" ")[0], 9))))


def build(data: RunData) -> Section | None:
    pods = _pods(data)
    if not pods:
        return None
    shown = [p for p in ORDER if any(p in i["metadata"]["pod_phases"] for i in pods)]
    with_events = any(i["metadata"].get("pod_events") for i in pods)
    cells, resolutions = [], set()
    for inst in pods:
        meta = inst["metadata"]
        phases, res = meta["pod_phases"], float(meta.get("pod_phase_resolution_s") or 1e-9)
        # an event is no finer than the pod's creation it is measured from
        ev_res = max(res, float(meta.get("pod_event_resolution_s") or res))
        resolutions.add(res)
        places = min(digits(res), 3)  # podman's nanoseconds: milliseconds are plenty here
        t0 = phases["created"]
        row = [inst["name"], inst["environment"], meta.get("node") or meta.get("machine") or "-",
               meta.get("backend") or "-", _resolution_text(res)]
        row += ["-" if p not in phases else f"{phases[p] - t0:.{places}f}" for p in shown]
        if with_events:
            row.append(_events(meta, t0, ev_res) or "-")
        cells.append(row)
    columns = ["pod", "environment", "node", "backend", "resolution", *(LABELS[p] for p in shown)]
    if with_events:
        columns.append("events (seconds after creation)")
    whole = any(r >= 1 for r in resolutions)
    note = ("Seconds after the pod's creation, from the pod's own record: on a cluster the pod object (metadata."
            "creationTimestamp, the time each condition became True, the container's start) and the scheduler's and "
            "kubelet's events; under podman kube play its inspect output. "
            + ("The Kubernetes API stores these times in whole seconds (truncated), so each figure here is a "
               "difference of two whole-second times, uncertain by up to 1 s, and none is printed finer. "
               if whole else "")
            + "The request and the first command that ran (the instance table above) are this machine's clock.")
    section = Section(slug(data.id, "pod-phases"), "Pod start-up phases", intro=(
        "How each pod started, by the pods' own timestamps, at the resolution they were stored with."))
    section.blocks.append(Table("Pod start-up phases (seconds after the pod's creation)", columns, cells,
                                numeric=set(range(5, 5 + len(shown))), note=note))
    return section

