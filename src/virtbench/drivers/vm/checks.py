"""What `virtbench check` does with VMs: the vm driver's LifecycleOps."""

from __future__ import annotations

import secrets

from ..checks_base import LifecycleOps


class VmLifecycle(LifecycleOps):
    """Reboot through QMP, a hot-plugged virtio disk, a disk snapshot booted as a new VM."""

    def reboot(self, instances):
        return self.driver.reboot(instances)

    def attach_disk(self, inst):
        info = inst.attach_disk(64 << 20)
        dev = info["guest_device"]
        if not dev:
            return False, f"QEMU attached {info['id']} but the guest saw no new block device within " \
                          f"{info['seconds']:.0f} s", info
        token = secrets.token_hex(8)
        res = inst.exec(["sh", "-c", f"echo {token} | dd of={dev} bs=512 conv=sync,fsync 2>/dev/null && "
                                     f"dd if={dev} bs=512 count=1 2>/dev/null | head -c 16"], timeout=60)
        if not res.ok or token not in res.stdout:
            return False, f"the guest sees {dev} but writing and reading it failed: {res.describe_failure()}", info
        return True, f"hot-plugged a 64 MiB virtio disk; the guest saw {dev} after {info['seconds']:.2f} s " \
                     "and wrote and read it", info

    def boot_from_snapshot(self, inst, tmp):
        snap = tmp / "snapshot.raw"
        paused = inst.snapshot_disk(snap)
        new = self.driver.provision_from_disk(self.env, snap, "snapshot")
        return new, f"snapshot while running (paused {paused:.2f} s), booted a new VM from it", \
            lambda: snap.unlink(missing_ok=True)
