"""Bare remote hosts over SSH: one instance per host of an inventory group.

An instance is a private scratch directory on its host; commands run there through the host's
SSH executor (one multiplexed connection per host per run), and the native kernels are shipped
once into the host's content-addressed cache (machines/ship.py), so remote hosts run the very
bytes the local host runs. Nothing outside virtbench's own directory there is touched.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ... import procs
from ...errors import UserError
from ...machines import Machine, MachineUnreachable, ledger, owners, ship
from ...machines.inventory import HostSpec
from ...model import EnvSpec, ExecResult
from ..base import Driver, Instance, OptionSpec, Problem, Traits


MARK = "VIRTBENCH_INSTANCE"


def _scratch_root(machine: Machine) -> str:
    return f"{ship.remote_dir(machine)}/scratch"


def leftover_scratch(machine: Machine) -> list[str]:
    """Scratch directories of killed runs on the machine, with the processes that carry their marker
    or name them (owner files: machines/owners.py)."""
    return [f"scratch directory {d}" for d in owners.sweep_dir(machine, _scratch_root(machine), MARK)]


# The ledger's finder of scratch directories; the cloud driver's instances leave the same kind.
SCRATCH = ledger.Finder("scratch directories", leftover_scratch)


class SshInstance(Instance):
    def __init__(self, name: str, env: EnvSpec, role: str, index: int, machine: Machine, scratch: str,
                 shipped: ship.Shipped, address: str | None, release=None):
        super().__init__(name, env, role, index)
        self._release = release
        self._mark = scratch.rstrip("/").rsplit("/", 1)[-1]  # run id and instance name: unique
        self.machine = self.inside = machine  # a host's inside is the host
        self.shipped = shipped
        self._scratch = scratch
        self.address = address

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        if gone := self._gone(argv):
            return gone
        # Everything the instance starts carries its marker, so teardown finds it (an MPI cluster's
        # sshd, a server a workload left behind) without touching anything else on the host.
        return self.machine.run(argv, timeout=timeout, stdin=stdin, env={**(env or {}), MARK: self._mark})

    def bin(self, name: str) -> str:
        return f"{self.shipped.bin_dir}/{name}"

    def scratch_dir(self) -> str:
        return self._scratch

    def alive(self) -> bool:
        if self._torn_down:
            return False
        return self.machine.run(["true"], timeout=30).ok

    def metadata(self) -> dict[str, Any]:
        meta = {**super().metadata(), "native": self.shipped.how, "native_hash": self.shipped.native_hash}
        if self.shipped.compiler:
            meta["native_compiler"] = self.shipped.compiler
        return meta

    def _destroy(self) -> None:
        # A host that went away cannot be cleaned now; its scratch directory (under virtbench's own
        # directory there) is all that stays, and the teardown of the other instances goes on.
        try:
            self.machine.kill_matching([f"{MARK}={self._mark}", self._scratch])
            self.machine.run(["rm", "-rf", "--", self._scratch, self._scratch + owners.OWNER], timeout=120)
        finally:
            if self._release:
                self._release()


class SshDriver(Driver):
    name = "ssh"
    traits = Traits(is_machine=True, real_machine=True)
    leftovers = (SCRATCH,)
    description = "bare remote hosts over SSH (an inventory group; one instance per host)"
    supports_shapes = False
    options = {"hosts": OptionSpec(str, "all", "inventory group, host name or comma list of them "
                                               "whose hosts the instances run on (one per host)")}

    def __init__(self, context):
        super().__init__(context)
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}  # host name -> instances on it now

    def check(self, env: EnvSpec | None = None) -> list[Problem]:
        import shutil

        return [] if shutil.which("ssh") else [Problem("the ssh client is not installed",
                                                       "apt-get install openssh-client")]

    def check_env(self, env: EnvSpec) -> list[Problem]:
        try:
            hosts = self.context.machines.select(env.options.get("hosts") or "all")
        except UserError as exc:
            return [Problem(f"hosts '{env.options.get('hosts') or 'all'}': {exc.message}", exc.hint or
                            "pass --inventory FILE")]
        return [] if hosts else [Problem(f"hosts '{env.options.get('hosts')}' names no host", "check the inventory")]

    def _pick(self, hosts: list[HostSpec], count: int, env: EnvSpec) -> list[HostSpec]:
        """The least busy hosts, in inventory order: a server and its client land on two hosts."""
        if count > len(hosts):
            raise UserError(f"environment {env.name} needs {count} instance(s) but its hosts "
                            f"('{env.options.get('hosts', 'all')}') are {len(hosts)}: "
                            + ", ".join(h.name for h in hosts),
                            "add hosts to the inventory group, or ask for fewer instances")
        with self._lock:
            order = sorted(range(len(hosts)), key=lambda i: (self._busy.get(hosts[i].name, 0), i))
            picked = [hosts[i] for i in sorted(order[:count])]
            for h in picked:
                self._busy[h.name] = self._busy.get(h.name, 0) + 1
        return picked

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        pool = self.context.machines
        hosts = pool.select(env.options.get("hosts") or "all")
        picked = self._pick(hosts, count, env)
        made: list[SshInstance | None] = [None] * count
        errors: list[str] = []

        def start(k: int) -> None:
            spec = picked[k]
            name = f"{env.name}-{role}-{k}"
            try:
                made[k] = self._start(pool.get(spec.name), spec, env, name, role, k)
            except MachineUnreachable as exc:  # its str() already starts with the host's name
                errors.append(f"{spec.name}: {exc.reason}")
            except (UserError, OSError) as exc:
                errors.append(f"{spec.name}: {exc}")

        try:
            procs.fan_out(start, count)
        except BaseException:
            self._undo([m for m in made if m], picked)
            raise
        if errors:
            self._undo([m for m in made if m], picked)
            raise UserError(f"cannot start {env.name} on its hosts:\n  " + "\n  ".join(errors),
                            "check the hosts with: virtbench hosts --inventory FILE")
        return [m for m in made if m]

    def _start(self, machine: Machine, spec: HostSpec, env: EnvSpec, name: str, role: str, k: int) -> SshInstance:
        import time

        requested = time.time()
        machine.connect()
        created = time.time()
        shipped, scratch = open_scratch(machine, self.context.run_id, name)
        inst = SshInstance(name, env, role, k, machine, scratch, shipped, _address(spec),
                           release=lambda: self._release(spec.name))
        inst.mark("requested", requested)
        inst.mark("created", created)
        inst.mark("running", created)
        inst.mark("ready")
        return inst

    def _release(self, host: str) -> None:
        with self._lock:
            self._busy[host] = max(0, self._busy.get(host, 0) - 1)

    def _undo(self, made: list[SshInstance], picked: list[HostSpec]) -> None:
        with procs.interrupts_held():
            for inst in made:
                try:
                    inst.teardown()
                except Exception:
                    pass
        started = {i.machine.name for i in made}
        for spec in picked:
            if spec.name not in started:
                self._release(spec.name)


def open_scratch(machine: Machine, run_id: str, name: str) -> tuple[ship.Shipped, str]:
    """Ship the kernels to the machine (once per machine and content) and make an instance's
    scratch directory there, with an owner file beside it; the cloud driver's instances start the
    same way. What killed runs left there went when the pool handed out the machine (`SCRATCH`)."""
    scratch = f"{_scratch_root(machine)}/{run_id}-{name}"
    shipped = ship.ensure_native(machine, make_dirs=(scratch,))
    owners.claim(machine, scratch, run_id)
    return shipped, scratch


def _address(spec: HostSpec) -> str | None:
    """An IP address peers can use (MPI hostfiles, iperf3): the inventory's, resolved here."""
    dest = spec.destination
    try:
        return str(ipaddress.ip_address(dest))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(dest, None, socket.AF_INET)[0][4][0]
    except OSError:
        return None
