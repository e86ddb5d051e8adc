"""The guest side of a cloud volume: find the block device the attachment made, put ext4 on it,
mount it where disk workloads write, and undo that. Through the instance's SSH executor.

Which device a volume becomes is the guest kernel's choice (Xen: /dev/xvdf for /dev/sdf; Nitro:
an NVMe namespace whose serial is the volume id without its dash), so we look for the device
that appeared after the attachment, preferring the one whose serial names the volume.
Where SSH reaches a stand-in host instead of the API's instance (ssh_override, with moto), no
device can appear: the volume is then real in the API only, and its guest side is a directory
on that host, labelled as such in every sample.
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import UserError

STAND_IN = ("stand-in: the volume exists in the cloud API only; its guest side is a directory on the "
            "SSH host that stands in for the instance (not a block device)")


def _run(inst: Any, argv: list[str], timeout: float = 120) -> str:
    res = inst.exec(argv, timeout=timeout)
    if not res.ok:
        raise UserError(f"{inst.name}: {' '.join(argv[:3])} failed: {res.describe_failure()}")
    return res.stdout


def _sudo(inst: Any) -> list[str]:
    """Cloud images log in as an ordinary user with password-less sudo."""
    return [] if _run(inst, ["id", "-u"]).strip() == "0" else ["sudo", "-n"]


def block_devices(inst: Any) -> dict[str, str]:
    """Whole disks the guest sees: name -> serial ('' when it has none)."""
    out = {}
    for line in _run(inst, ["lsblk", "-dn", "-o", "NAME,SERIAL"]).splitlines():
        parts = line.split()
        if parts:
            out[parts[0]] = parts[1] if len(parts) > 1 else ""
    return out


def find_device(inst: Any, volume_id: str, before: dict[str, str], timeout: float = 120) -> str:
    serial = volume_id.replace("-", "")
    deadline = time.monotonic() + timeout
    while True:
        now = block_devices(inst)
        for name, ser in now.items():
            if ser and ser.replace("-", "") == serial:
                return f"/dev/{name}"
        new = sorted(set(now) - set(before))
        if len(new) == 1:
            return f"/dev/{new[0]}"
        if time.monotonic() > deadline:
            raise UserError(f"{inst.name}: the API attached {volume_id} but no new block device appeared in "
                            f"the guest within {timeout:g} s (new: {', '.join(new) or 'none'})")
        time.sleep(0.5)


def mount(inst: Any, device: str, directory: str, fresh: bool = True) -> None:
    sudo = _sudo(inst)
    if fresh:
        _run(inst, [*sudo, "mkfs.ext4", "-q", "-F", device], timeout=600)
    _run(inst, ["mkdir", "-p", directory])
    _run(inst, [*sudo, "mount", device, directory])
    user = _run(inst, ["id", "-u"]).strip()
    _run(inst, [*sudo, "chown", user, directory])


def unmount(inst: Any, directory: str) -> None:
    inst.exec([*_sudo(inst), "umount", directory], timeout=120)


def describe(device: str | None) -> dict[str, Any]:
    if device is None:
        return {"storage_fs": "stand-in directory", "storage_mechanism": STAND_IN}
    return {"storage_fs": "ext4", "storage_mechanism": f"cloud volume attached through the API, {device} "
                                                      "in the guest, ext4"}
