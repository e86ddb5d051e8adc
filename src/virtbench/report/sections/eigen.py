"""vb-eigen, the coarse-grained eigensolver (study 001's Bloss): the generic tables and charts, then its
times beside the study's Bloss column (minutes on bare metal, Xen PV/HVM and EC2), matched by kind of
environment with each side's ratio to bare metal. The efficiency curves with the algorithmic ideal are in
the run's scaling section."""

from __future__ import annotations

from ..data import RunData
from ..model import Section
from . import generic, npb


def build(data: RunData, rows: list[dict]) -> Section:
    section = generic.build(data, rows)
    timed = [r for r in rows if r["metric"] == "time" and r["n"]]
    if timed:
        section.blocks.insert(0, npb.beside_study(data, timed, lambda r: "Bloss (min)",
                                                  "published Bloss time [min]", "vb-eigen times"))
    return section
