"""The one place a Machine is made from an inventory host: its `ansible_connection` picks the kind,
as Ansible's connection plugins do. `ssh` (the default) is an SshMachine; `local` is this machine
under the host's inventory name. The insides of instances (containers, pods, VM guests) are reached
through their instances, not through an inventory."""

from __future__ import annotations

from ..errors import UserError
from .base import Machine
from .inventory import HostSpec

KINDS = ("ssh", "local")


def connection_kind(spec: HostSpec) -> str:
    """The host's ansible_connection ('ssh' when unset; Ansible's 'paramiko' is an ssh too)."""
    kind = str(spec.vars.get("ansible_connection") or "ssh").strip().lower()
    return "ssh" if kind in ("paramiko", "smart") else kind


def machine_for(spec: HostSpec) -> Machine:
    """A Machine for one inventory host, not yet connected (Machine.connect says what is wrong)."""
    kind = connection_kind(spec)
    if kind == "ssh":
        from .ssh import SshMachine

        return SshMachine(spec)
    if kind == "local":
        from .local import LocalMachine

        return LocalMachine(spec.name)
    raise UserError(f"host '{spec.name}': ansible_connection={kind} is not a connection virtbench has",
                    f"use one of: {', '.join(KINDS)} (containers, pods and VM guests are environments, "
                    "not inventory hosts)")
