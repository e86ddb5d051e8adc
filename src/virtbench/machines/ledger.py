"""The ledger of leftovers: who made what a run leaves on a machine, and the one sweep that removes
what runs killed outright left there.

Everything a run makes carries one owner record (`record`): the controller's host name, boot id,
pid and that pid's start time, and the run id. Files carry it as JSON (an owner file beside a
remote directory, owner.json in a vm run directory: owners.py), engine and cluster objects as
labels (`labels`), and what conditions make here carries the pid and start time in its name. One
rule says whether an owner is gone (`owners.owner_dead`).

Each kind of leftover has a `Finder`: it lists the leftovers of gone owners on a machine, removes
them and returns what it removed, one line each. A driver declares the finders of what it makes
(`Driver.leftovers`); what belongs to no driver (conditions' mounts, loop devices, namespaces)
registers here (`register`). The run's Pool runs every finder once on each machine it hands out
(machines/__init__.py), local and remote alike, and the run's notes name each removal.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .base import Machine, MachineUnreachable
from .owners import controller, owner_dead, record, sweep_dir

PREFIX = "virtbench."  # of the owner labels


@dataclass(frozen=True)
class Finder:
    """One kind of leftover: `find(place)` removes those of gone owners there and names them."""

    kind: str  # what it finds, plural ("containers"); one finder per kind
    find: Callable[[Any], list[str]]
    here_only: bool = False  # reads this machine's own state (/proc, /sys, /tmp): runs nowhere else
    elsewhere_only: bool = False  # what is made on other machines only (here names tell the owner)


_registered: dict[str, Finder] = {}


def register(finder: Finder) -> Finder:
    """A finder of leftovers no driver declares, run on every machine of every run from now on."""
    _registered[finder.kind] = finder
    return finder


def registered() -> list[Finder]:
    return list(_registered.values())


def labels(run_id: str, clean: Callable[[Any], str] = str) -> dict[str, str]:
    """The owner record as labels (containers, kube-play and cluster objects); `clean` makes a value
    valid where labels are restricted (Kubernetes: manifests.label_value)."""
    me = record(run_id)
    return {f"{PREFIX}{k}": clean(me[key] if me[key] is not None else "") for k, key in
            (("host", "host"), ("boot", "boot"), ("pid", "pid"), ("pidstart", "pidstart"), ("run", "run_id"))}


def from_labels(found: Mapping[str, str], clean: Callable[[Any], str] = str) -> dict[str, Any]:
    """The owner record in an object's labels, for owner_dead. Labels without a host (older ones,
    written before the host was) are this machine's; a host written through `clean` is this one
    when it equals this host's cleaned name."""
    me = controller()["host"]
    host = found.get(f"{PREFIX}host") or me
    pid = str(found.get(f"{PREFIX}pid", ""))
    return {"host": me if host in (me, clean(me)) else host, "boot": found.get(f"{PREFIX}boot") or None,
            "pid": int(pid) if pid.isdigit() else None, "pidstart": found.get(f"{PREFIX}pidstart") or None,
            "run_id": found.get(f"{PREFIX}run")}


def gone(found: Mapping[str, str], clean: Callable[[Any], str] = str) -> bool:
    """Is the owner named by these labels gone? A label set without a pid names no owner that could
    still run (a half-written object of a killed run): gone too, when it is this controller's."""
    owner = from_labels(found, clean)
    if owner["pid"] is None:
        return owner["host"] == controller()["host"]
    return owner_dead(owner)


def sweep(place: Any, finders: Iterable[Finder]) -> list[str]:
    """Run the finders on a machine (or another place a finder knows, e.g. a cluster); what they
    removed, named with the machine. A machine that stops answering ends its sweep; a finder that
    fails is left out (the run goes on; the next run tries again)."""
    on = place.on if isinstance(place, Machine) else ""
    removed: list[str] = []
    for finder in finders:
        here = isinstance(place, Machine) and place.is_local
        if (finder.here_only and not here) or (finder.elsewhere_only and here):
            continue
        try:
            removed += [f"{name}{on}" for name in finder.find(place)]
        except MachineUnreachable:
            break
        except Exception:  # noqa: BLE001 - a sweep never fails the run that runs it
            continue
    return removed


def _local_workdirs(machine: Machine) -> list[str]:
    """The work and monitor directories a killed run left in this machine's temporary directory
    (owners.local_workdir), with whatever still runs in them."""
    return sweep_dir(machine, tempfile.gettempdir(), names="virtbench-*", what="its local work directory")


register(Finder("local work directories", _local_workdirs, here_only=True))
