"""The storage condition: where a disk workload's files live, as a condition of the run. This module
says what a target value means and records what each instance got; targets.py makes them.

Values are `KIND`, `KIND:SIZE` (e.g. `nbd`, `nbd:8g`, `tmpfs:2g`) or `nbd://HOST:PORT[/EXPORT]`:
- local   the environment's own disk: the host's file system, a container's overlay, a VM's disk;
- tmpfs   memory;
- volume  a container-engine volume (podman/docker local driver), bind-mounted into the container
          (on the host: the same directory, as a same-disk baseline);
- nbd     a network block device: nbdkit serving a disk image from a server link, attached with
          nbdfuse -> loop device (direct I/O) -> ext4 (by QEMU for a VM);
- iscsi   tgt serving the image as an iSCSI LUN from a server link, attached with QEMU's
          user-space initiator (libiscsi, via qemu-nbd) -> nbdfuse -> loop -> ext4, because these
          kernels have no iSCSI initiator;
- nfs     nfs-ganesha (NFSv4.1) on a server link, mounted by the instance's kernel: on a host by its
          own NFS client, in a container by the host's (passed in, as a pod's PersistentVolume), in a
          VM by the guest kernel over a guestfwd relay; skipped with the reason where the host's
          kernel has no NFS client (hosts and containers). Pods use their environment's `nfs_share`
          instead (an existing export mounted when the pods were made: a PersistentVolume + claim);
          without one the cell is skipped with a reason that says to set it;
- nfs-datastore  a VM's disk image on nfs-ganesha's export, opened by QEMU's NFS client (libnfs,
          NFSv3 + rpcbind) with no mount: the hypervisor's NFS datastore; VMs only;
- nbd://  an existing NBD export someone else serves: attached, never formatted;
- cloud-volume  a volume of the cloud API (EBS or alike) made and attached by the cloud instance
          itself (`attach_volume`), ext4 in the guest (study 000's EBS + bonnie++).
Every target and helper is removed by Applied.close(), also on Ctrl-C.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..errors import UserError
from . import nfs, targets
from .base import Applied, Condition, Instance
from .hostres import HostCommandFailed, parse_size

KINDS = ("local", "tmpfs", "volume", "nbd", "iscsi", "nfs", "nfs-datastore", "cloud-volume")
MAKERS: dict[str, targets.Maker] = {
    "local": targets.local_disk, "tmpfs": targets.tmpfs, "volume": targets.volume, "nbd": targets.nbd,
    "iscsi": targets.iscsi, "nfs": nfs.nfs, "nfs-datastore": nfs.nfs_datastore, "cloud-volume": targets.cloud_volume,
}


def split(value: str) -> tuple[str, int | None]:
    if is_external(value):
        return "nbd", None
    kind, _, size = str(value).partition(":")
    return kind, parse_size(size) if size else None


def is_external(value: str) -> bool:
    """An existing NBD export the user names (nbd://HOST:PORT[/EXPORT])."""
    return str(value).startswith("nbd://")


def parse_external(uri: str) -> tuple[str, int, str]:
    """nbd://HOST:PORT[/EXPORT] -> (host, port, export)."""
    parts = urlsplit(uri)
    try:
        port = parts.port or targets.NBD_PORT
    except ValueError:
        raise ValueError(f"{uri!r}: the port is not a number") from None
    if not parts.hostname:
        raise ValueError(f"{uri!r} names no host; use nbd://HOST:PORT[/EXPORT]")
    return parts.hostname, port, parts.path.lstrip("/")


class Storage(Condition):
    key = "storage"
    help = "where disk workloads write: " + ", ".join(KINDS) + " (KIND or KIND:SIZE, e.g. nbd:8g)"
    order = 60

    def coerce(self, raw: Any) -> str:
        text = str(raw).strip()
        if is_external(text):
            parse_external(text)
            return text
        text = text.lower()
        kind, _, size = text.partition(":")
        if kind not in KINDS:
            raise ValueError(f"{raw!r} is not a storage target; use one of {', '.join(KINDS)}")
        if size:
            if kind in ("local", "volume"):
                raise ValueError(f"storage '{kind}' takes no size")
            parse_size(size)
        return text

    def is_noop(self, value: Any) -> bool:
        return value == "local"

    def apply(self, value: Any, instances: dict[str, list[Instance]], applied: Applied,
              condition: dict[str, Any]) -> None:
        kind, size = split(value)
        seen = set()
        for pool in instances.values():
            for inst in pool:
                if inst.name in seen:
                    continue
                seen.add(inst.name)
                try:
                    if is_external(value):
                        path, meta = targets.nbd_external(inst, parse_external(value), applied)
                    else:
                        path, meta = MAKERS[kind](inst, size, applied)
                except HostCommandFailed as exc:
                    # not a limit of this machine but a fault: recorded as a failed attempt
                    raise UserError(f"storage={value} could not be set up: {exc}") from None
                if path:
                    applied.set_storage(inst, path)
                for k, v in meta.items():
                    applied.metadata.setdefault(k, v)
