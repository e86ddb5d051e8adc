"""Machines: where commands run. `Pool` hands out one open executor per machine for a run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from ..errors import UserError
from . import ledger
from .base import Machine, MachineUnreachable, Process
from .factory import machine_for
from .inventory import HostSpec, Inventory
from .local import LOCAL_NAME, LocalMachine, local

LOCAL_NAMES = (LOCAL_NAME, "local", "")


class Pool:
    """The machines of one run (or command): the local one, and the hosts of an inventory (made by
    machine_for: SSH hosts with one multiplexed connection each), all closed together at the end.

    The pool keeps the run's ledger sweep (machines/ledger.py): every machine it hands out is swept
    once per kind of leftover (the finders its drivers enlisted and those registered), before the
    caller gets it; a kind enlisted later is swept at the next hand-out. What went waits in
    `removed` for the run's notes (the drivers' `stale_removed` is this list) until `take` hands it
    over; at the end of the run `drain` waits for sweeps still going and hands over the rest."""

    def __init__(self, inventory: Inventory | None = None, make: Callable[[HostSpec], Machine] = machine_for):
        self.inventory = inventory
        self._make = make
        self._open: dict[str, Machine] = {}
        self._lock = threading.Lock()
        self.removed: list[str] = []
        self._finders: dict[str, ledger.Finder] = {}
        self._swept: dict[str, set[str]] = {}  # machine name -> kinds swept there
        self._sweeping: dict[str, threading.Lock] = {}  # machine name -> held while it is swept

    def spec(self, name: str) -> HostSpec:
        if self.inventory and name in self.inventory.hosts:
            return self.inventory.hosts[name]
        if self.inventory is None:
            # No inventory: a name is an ssh destination (~/.ssh/config resolves it).
            return HostSpec(name)
        raise UserError(f"machine '{name}' is not in the inventory {self.inventory.path}",
                        "valid hosts: " + ", ".join(self.inventory.hosts) if self.inventory.hosts
                        else "the inventory has no hosts")

    def get(self, name: str | None = None) -> Machine:
        """The machine (None: this one), swept of what killed runs left there first."""
        machine = self._machine(name)
        self._sweep(machine)
        return machine

    def _machine(self, name: str | None) -> Machine:
        if name is None or name in LOCAL_NAMES:
            return local()
        with self._lock:
            if name not in self._open:
                self._open[name] = self._make(self.spec(name))
            return self._open[name]

    def enlist(self, finders: Iterable[ledger.Finder]) -> None:
        """Kinds of leftover the run's drivers make: swept on every machine the pool hands out."""
        with self._lock:
            for finder in finders:
                self._finders.setdefault(finder.kind, finder)

    def sweep(self, name: str | None = None) -> list[str]:
        """Sweep a machine of the run now (None: this one), each kind once per run; then hand over,
        for the run's notes, everything the run's sweeps removed that nobody has reported yet."""
        self._sweep(self._machine(name))
        return self.take()

    def sweep_place(self, key: str, place: object, finders: Iterable[ledger.Finder]) -> list[str]:
        """The same for a place that is no machine (a Kubernetes cluster, named by `key`); what it
        removed is in `removed` too."""
        return self._once(key, place, list(finders))

    def take(self) -> list[str]:
        """Everything the run's sweeps removed that nobody has reported yet (and no longer kept)."""
        with self._lock:
            out, self.removed[:] = list(self.removed), []
        return out

    def drain(self, wait: float = 30.0) -> list[str]:
        """The run's last report: wait (up to `wait` seconds) for sweeps still going in other threads,
        then `take`. A sweep that outlasts the wait reports nothing to this run."""
        deadline = time.monotonic() + wait
        with self._lock:
            going = list(self._sweeping.values())
        for lock in going:
            if lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                lock.release()
        return self.take()

    def _sweep(self, machine: Machine) -> list[str]:
        with self._lock:
            finders = [*ledger.registered(), *self._finders.values()]
        return self._once(machine.name, machine, finders)

    def _once(self, key: str, place: object, finders: list[ledger.Finder]) -> list[str]:
        with self._lock:
            done = self._swept.setdefault(key, set())
            lock = self._sweeping.setdefault(key, threading.Lock())
            if not lock.locked() and all(f.kind in done for f in finders):
                return []  # the common case: nothing left to sweep there
        with lock:  # a second caller waits for the sweep, so it gets a swept machine
            todo = [f for f in finders if f.kind not in done]
            removed = ledger.sweep(place, todo)
            with self._lock:  # kept before the sweep counts as done: drain() then finds it
                done.update(f.kind for f in todo)
                self.removed += removed
            return removed

    def select(self, pattern: str | None) -> list[HostSpec]:
        """Hosts of a group, host name or comma list; without an inventory, names as ssh destinations."""
        pattern = pattern or "all"
        if self.inventory is None:
            if pattern == "all":
                raise UserError("the ssh environment needs hosts, and no inventory was given",
                                "pass --inventory FILE (an Ansible-style inventory, e.g. from "
                                "'virtbench testbed up'), set inventory under [suite], or name hosts = \"a,b\"")
            return [_ssh_destination(n.strip()) for n in pattern.split(",") if n.strip()]
        return self.inventory.select(pattern)

    def opened(self) -> list[Machine]:
        with self._lock:
            return list(self._open.values())

    def close(self) -> None:
        with self._lock:
            items, self._open = list(self._open.values()), {}
        for m in items:
            try:
                m.close()
            except Exception:  # closing is best effort: the master dies by ControlPersist anyway
                pass


def _ssh_destination(name: str) -> HostSpec:
    """A host named without an inventory: a concrete Host of ~/.ssh/config, or a resolvable name
    (ssh then applies the user's config when it connects)."""
    import socket

    from .sshconfig import ssh_config_hosts

    user_host = name.rpartition("@")[2]
    if name not in ssh_config_hosts():
        try:
            socket.getaddrinfo(user_host, None)
        except OSError:
            raise UserError(f"'{name}' is neither a Host in ~/.ssh/config nor a name that resolves",
                            "pass --inventory FILE (an Ansible-style inventory; 'virtbench testbed up 2 "
                            "--inventory FILE' makes one to try), or add the host to ~/.ssh/config") from None
    return HostSpec(name)


def pool_for(inventory_path: str | None) -> Pool:
    """A Pool over the inventory at this path (none: this machine, and ssh destinations by name)."""
    from . import inventory

    return Pool(inventory.load(inventory_path) if inventory_path else None)


__all__ = ["Machine", "MachineUnreachable", "Process", "HostSpec", "Inventory", "LocalMachine", "local",
           "LOCAL_NAME", "Pool", "pool_for", "machine_for", "ledger"]
