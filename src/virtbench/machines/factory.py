"""The one place a Machine is made from an inventory host: its `ansible_connection` picks the kind,
as Ansible's connection plugins do. `ssh` (the default) is an SshMachine; `local` is this machine
under the host's inventory name. The insides of instances (containers, pods, VM guests) are reached
through their instances, not through an inventory."""

from __future__ import annotations

import importlib

from ..errors import UserError
from .base import Machine
from .inventory import HostSpec

# ansible_connection -> the Machine class that serves it (made with Machine.from_host): one line per
# kind of place, imported on use.
KINDS: dict[str, str] = {
    "ssh": "virtbench.machines.ssh:SshMachine",
    "local": "virtbench.machines.local:LocalMachine",
}


def connection_kind(spec: HostSpec) -> str:
    """The host's ansible_connection ('ssh' when unset; Ansible's 'paramiko' is an ssh too)."""
    kind = str(spec.vars.get("ansible_connection") or "ssh").strip().lower()
    return "ssh" if kind in ("paramiko", "smart") else kind


def machine_for(spec: HostSpec) -> Machine:
    """A Machine for one inventory host, not yet connected (Machine.connect says what is wrong)."""
    kind = connection_kind(spec)
    if kind not in KINDS:
        raise UserError(f"host '{spec.name}': ansible_connection={kind} is not a connection virtbench has",
                        f"use one of: {', '.join(KINDS)} (containers, pods and VM guests are environments, "
                        "not inventory hosts)")
    module, _, cls = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), cls).from_host(spec)
