"""Whether a machine's kernel has an NFS client, and what that means for the ways that need one:
storage=nfs mounted by a host (conditions/targets.py) and the NFS volume of a kube-play pod (the
pods driver). Below both, so the driver does not import a condition."""

from __future__ import annotations

from . import Machine, local

_NO_NFS_CLIENT = ("no NFS client (no nfs/nfs4 in /proc/filesystems, 'modprobe nfs' failed), and no "
                  "user-space NFS client can mount a file system; a VM mounts NFS with its own kernel "
                  "(storage=nfs or nfs-datastore with the vm driver), and remote storage works here with "
                  "storage=nbd or storage=iscsi")


def kernel_nfs_client(machine: Machine | None = None) -> tuple[bool, str]:
    """Has the kernel of `machine` (default: this one) an NFS client, after trying to load it?"""
    m = machine or local()

    def has() -> bool:
        names = {ln.split()[-1] for ln in m.read_text("/proc/filesystems").splitlines() if ln.strip()}
        return bool(names & {"nfs", "nfs4"})

    if has():
        return True, ""
    if m.which("modprobe"):
        m.run(["modprobe", "-q", "nfs"], timeout=60)
        if has():
            return True, ""
    return False, f"the kernel of {m.place} has {_NO_NFS_CLIENT}"


def kube_play_nfs_refusal(share: str, machine: Machine) -> str | None:
    """Why the kube-play backend cannot mount the pods driver's `nfs_share` on `machine`, or None:
    its NFS claim is a podman volume that the machine's kernel NFS client mounts at pod start (the
    same client the container way needs)."""
    ok, why = kernel_nfs_client(machine)
    if ok:
        return None
    return (f"storage=nfs in a kube-play pod: nfs_share {share} is a podman NFS volume, mounted by the "
            f"host's kernel NFS client when the pod starts (as a pod's PersistentVolume): {why}")
