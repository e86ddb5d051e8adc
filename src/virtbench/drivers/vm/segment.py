"""A private L2 segment for the VMs of one MPI cluster.

Each member gets a NIC hot-plugged over QMP whose QEMU backend is a `socket` netdev on one UDP
multicast group bound to 127.0.0.1 of the VMs' machine (no root, bridge or tap device; frames never
leave that machine), a static address 10.213.N.x/24 and /etc/hosts naming them all.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ... import procs
from ...errors import UserError
from . import qemu

# 10.213.N.0/24, N counting the segments of this process (separate L2 segments, so two processes
# using the same N never meet); multicast groups 239.213.x.y on a random port.
SEGMENT_NET = "10.213.{n}.0/24"
SEGMENT_MECHANISM = "qemu socket netdev: UDP multicast over 127.0.0.1"

# Inside a guest, after a NIC was hot-plugged: $1 = its MAC, $2 = address/prefix. Waits for the
# kernel to bind the driver, keeps IPv6 off it (QEMU's multicast socket loops a guest's own frames
# back, so duplicate address detection would fail), brings it up and prints its name.
_JOIN_SCRIPT = r"""
mac=$1 addr=$2 nic="" i=0
while [ -z "$nic" ]; do
  for d in /sys/class/net/*; do
    [ "$(cat "$d/address" 2>/dev/null)" = "$mac" ] && nic=${d##*/}
  done
  [ -n "$nic" ] && break
  i=$((i + 1))
  [ $i -gt 600 ] && { echo "no network interface with MAC $mac appeared within 60 s" >&2; exit 1; }
  sleep 0.1
done
echo 1 > "/proc/sys/net/ipv6/conf/$nic/disable_ipv6" 2>/dev/null || true
ip addr flush dev "$nic"
ip link set "$nic" up
ip addr add "$addr" dev "$nic"
echo "$nic"
"""

# $1 = the segment's name; stdin: "address hostname" lines of every member. Replaces earlier lines.
_HOSTS_SCRIPT = r"""
tag="# virtbench-segment"
{ grep -v "$tag" /etc/hosts 2>/dev/null || true; while read -r a n; do echo "$a $n $tag $1"; done; } > /etc/hosts.vb
mv /etc/hosts.vb /etc/hosts
"""


@dataclass
class Segment:
    """One segment: its multicast group and subnet, and the host number of each member."""

    index: int
    group: str
    port: int
    network: ipaddress.IPv4Network
    hosts: dict[str, int] = field(default_factory=dict)  # instance name -> host number

    @classmethod
    def new(cls, n: int) -> Segment:
        return cls(n, f"239.213.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}",
                   20000 + secrets.randbelow(40000), ipaddress.IPv4Network(SEGMENT_NET.format(n=n % 256)))

    @property
    def name(self) -> str:
        return f"{self.group}:{self.port}"

    def allocate(self, inst_name: str) -> ipaddress.IPv4Interface:
        if inst_name not in self.hosts:
            used = set(self.hosts.values())
            free = next((h for h in range(1, self.network.num_addresses - 1) if h not in used), None)
            if free is None:
                raise UserError(f"the cluster segment {self.network} has no free address left",
                                "use fewer VMs in one cluster (at most 253)")
            self.hosts[inst_name] = free
        return ipaddress.IPv4Interface(f"{self.network[self.hosts[inst_name]]}/{self.network.prefixlen}")

    def describe(self) -> dict[str, Any]:
        return {"mechanism": SEGMENT_MECHANISM, "group": self.name, "subnet": str(self.network)}


class Member(Protocol):
    """What a segment asks of a VM: drivers/vm/instance.py's VmInstance, which imports this module. join
    and leave hot-plug the NIC through the VM's QMP, each NIC under a number the VM hands out."""

    name: str
    hostname: str
    address: str | None
    segment: Segment | None
    segment_nic: dict[str, str] | None
    s: dict[str, Any]
    qmp: Any

    def new_nic_number(self) -> int: ...

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Any = None) -> Any: ...


def pick(instances: Sequence[Member], new: Callable[[], Segment]) -> tuple[Segment, list[Member]]:
    """The segment most of these VMs are on already (e.g. the runner replaced a dead member), else a
    new one; and the VMs still to join it, their addresses handed out here (not by joining threads)."""
    counts: dict[int, int] = {}
    for inst in instances:
        if inst.segment is not None:
            counts[id(inst.segment)] = counts.get(id(inst.segment), 0) + 1
    seg = None
    if counts:
        best = max(counts, key=counts.get)
        seg = next(i.segment for i in instances if id(i.segment) == best)
    seg = seg or new()
    todo = [i for i in instances if i.segment is not seg]
    for inst in todo:
        seg.allocate(inst.name)
    return seg, todo


def connect(seg: Segment, instances: Sequence[Member], todo: Sequence[Member]) -> None:
    """Join `todo` to `seg` (in parallel), then write every member's name into each /etc/hosts."""
    errors: list[BaseException] = []

    def join_one(k: int) -> None:
        try:
            join(todo[k], seg)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    procs.fan_out(join_one, len(todo))
    if errors:
        raise errors[0]
    hosts = "".join(f"{i.address} {i.hostname}\n" for i in instances).encode()
    for inst in instances:
        res = inst.exec(["sh", "-c", _HOSTS_SCRIPT, "sh", seg.name], stdin=hosts, timeout=60)
        if not res.ok:
            raise UserError(f"{inst.name}: writing the cluster's names to /etc/hosts failed: "
                            f"{res.describe_failure()}", "see the guest's console log")


def join(inst: Member, seg: Segment) -> str:
    """Hot-plug a NIC on `seg` (QMP netdev_add + device_add) and give it the VM's address there."""
    if inst.segment is seg:
        return inst.address
    if inst.segment is not None:
        leave(inst)
    iface = seg.allocate(inst.name)
    _, nic_model = qemu.DEVICE_MODELS[inst.s["devices"]]
    n = inst.new_nic_number()
    netdev, dev = f"vbseg{n}", f"vbseg{n}-nic"
    host = seg.hosts[inst.name]
    mac = f"52:54:00:d5:{seg.index % 256:02x}:{host:02x}"
    inst.qmp.execute("netdev_add", {"type": "socket", "id": netdev, "mcast": seg.name, "localaddr": "127.0.0.1"})
    try:
        inst.qmp.execute("device_add", {"driver": qemu.NIC_DEVICES[nic_model], "netdev": netdev, "id": dev, "mac": mac})
    except qemu.QmpError as exc:
        with contextlib.suppress(Exception):
            inst.qmp.execute("netdev_del", {"id": netdev})
        hint = ("use machine_type = \"pc\" (its PCI bus takes hot-plugged devices)" if inst.s["machine_type"] == "q35"
                else "use instances = 1 in this environment")
        raise UserError(f"{inst.name}: could not hot-plug the cluster NIC: {exc}", hint) from None
    inst.segment_nic = {"netdev": netdev, "device": dev, "mac": mac}
    res = inst.exec(["sh", "-c", _JOIN_SCRIPT, "sh", mac, str(iface)], timeout=90)
    if not res.ok:
        raise UserError(f"{inst.name}: the guest did not bring up the cluster NIC: {res.describe_failure()}",
                        "see the guest's console log; the NIC driver may be missing from the guest kernel")
    inst.segment_nic["guest_nic"] = res.stdout.strip().splitlines()[-1]
    inst.segment = seg
    inst.address = str(iface.ip)
    return inst.address


def leave(inst: Member) -> None:
    """Unplug the cluster NIC (best effort: the address goes at once, the device when the guest lets go)."""
    nic, inst.segment_nic = inst.segment_nic, None
    if inst.segment is not None:
        inst.segment.hosts.pop(inst.name, None)
    inst.segment, inst.address = None, None
    if not nic:
        return
    if nic.get("guest_nic"):
        inst.exec(["ip", "addr", "flush", "dev", nic["guest_nic"]], timeout=30)
    for cmd, arg in (("device_del", nic["device"]), ("netdev_del", nic["netdev"])):
        with contextlib.suppress(Exception):
            inst.qmp.execute(cmd, {"id": arg})
