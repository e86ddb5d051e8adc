"""Storage targets inside a VM guest. A VM gets remote disks from QEMU itself (its built-in NBD
client, libiscsi, libnfs for an image on an NFS datastore), hot-plugged as virtio disks through QMP
and mounted inside the guest: the hypervisor-side initiator the studies used. An NFS export the
guest mounts itself (nfs_mount) goes over the VM's user-mode network through a guestfwd relay.
Guest commands run through the instance's own exec.
"""

from __future__ import annotations

import contextlib

from ..drivers.base import DiskHotplug
from .base import Applied, Instance
from .hostres import HostCommandFailed, next_id, wait_for

# The guest image has busybox but not util-linux's mount.
_GUEST_FNS = ('vbmount() { if command -v mount >/dev/null 2>&1; then mount "$@"; '
              'else busybox mount "$@"; fi; }\n'
              'vbumount() { if command -v umount >/dev/null 2>&1; then umount "$@"; '
              'else busybox umount "$@"; fi; }\n')


def is_vm(inst: Instance) -> bool:
    """A guest that takes disks through its hypervisor, and is still up."""
    return isinstance(inst, DiskHotplug) and inst.qmp is not None


def guest(inst: Instance, script: str, *args: str, timeout: float = 120) -> str:
    res = inst.exec(["sh", "-c", _GUEST_FNS + script, "sh", *args], timeout=timeout)
    if not res.ok:
        raise HostCommandFailed(f"in {inst.name}: {res.describe_failure()}")
    return res.stdout


def _guest_quiet(inst: Instance, script: str, *args: str) -> None:
    inst.exec(["sh", "-c", _GUEST_FNS + script, "sh", *args], timeout=120)


def guest_dir(inst: Instance, kind: str, applied: Applied) -> str:
    path = f"/var/tmp/vb-{kind}-{next_id()}"
    guest(inst, 'mkdir -p "$1"', path)
    applied.defer(lambda: inst.exec(["rmdir", path], timeout=60))
    return path


def tmpfs(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    path = guest_dir(inst, "tmpfs", applied)
    guest(inst, 'vbmount -t tmpfs -o "size=$1,mode=1777" virtbench-tmpfs "$2"', str(size) if size else "25%", path)
    applied.defer(lambda: _guest_quiet(inst, 'vbumount "$1"', path))
    return path, {"storage_fs": "tmpfs", "storage_mechanism": "tmpfs mounted in the guest"}


def hotplug(inst: Instance, blockdev: dict, kind: str, applied: Applied, fstype: str = "ext4") -> str:
    """Hot-plug a QEMU block node as a virtio disk, mount its file system in the guest; the guest path."""
    before = set(guest(inst, "ls /sys/block").split())
    node = f"vb{kind}{next_id()}"
    qmp = inst.qmp
    qmp.execute("blockdev-add", {"node-name": node, **blockdev}, timeout=120)
    applied.defer(lambda: _qmp_quiet(inst, "blockdev-del", {"node-name": node}))
    qmp.execute("device_add", {"driver": "virtio-blk-pci", "drive": node, "id": f"{node}-dev"}, timeout=60)

    def unplug() -> None:
        _qmp_quiet(inst, "device_del", {"id": f"{node}-dev"})
        with contextlib.suppress(HostCommandFailed):  # the guest releases it (ACPI eject)
            wait_for(lambda: not (set(guest(inst, "ls /sys/block").split()) - before), 60,
                     "the guest to release the disk")
    applied.defer(unplug)
    new: list[str] = []

    def appeared() -> bool:
        new[:] = sorted(set(guest(inst, "ls /sys/block").split()) - before)
        return bool(new)
    wait_for(appeared, 120, f"the guest to see the {kind} disk", interval=0.5)
    path = guest_dir(inst, kind, applied)
    if fstype:
        guest(inst, 'vbmount -t "$3" "$1" "$2"', f"/dev/{new[0]}", path, fstype)
    else:
        guest(inst, 'vbmount "$1" "$2"', f"/dev/{new[0]}", path)
    applied.defer(lambda: _guest_quiet(inst, 'vbumount "$1"', path))
    return path


# The guest has no mount.nfs (nfs-common): busybox mount hands the options to the kernel's own
# NFSv4 mount parser, which needs the server's address (addr=) and ours (clientaddr=; QEMU's
# user-mode network gives the guest 10.0.2.15).
_NFS_MOUNT = ('modprobe nfsv4 2>/dev/null || true\n'
              'vbmount -t nfs4 -o "vers=4.1,proto=tcp,port=$2,addr=$1,clientaddr=10.0.2.15,hard,timeo=600" '
              '"$1:$3" "$4"')


def nfs_mount(inst: Instance, addr: str, port: int, export: str, applied: Applied) -> str:
    """Mount the NFSv4 export `export` of the server the guest reaches at addr:port; the guest path."""
    path = guest_dir(inst, "nfs", applied)
    guest(inst, _NFS_MOUNT, addr, str(port), export, path, timeout=180)
    applied.defer(lambda: _guest_quiet(inst, 'vbumount "$1" || vbumount -f "$1"', path))
    return path


def _qmp_quiet(inst: Instance, command: str, args: dict) -> None:
    with contextlib.suppress(Exception):  # a VM already gone has nothing left to undo
        inst.qmp.execute(command, args, timeout=60)
