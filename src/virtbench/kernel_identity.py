"""Which kernel an instance runs on, and how many CPUs that kernel has.

Instances that share one kernel share its CPUs, whatever each is entitled to: containers and pods
on one machine (a Kubernetes testbed's nodes are network namespaces of one machine, so its pods
too), while a VM is a kernel of its own with its vCPUs. The boot id tells kernels apart: the kernel
draws it at boot, and no container runtime namespaces it. Read inside the instance, it is the
kernel the instance's processes run on, whatever the driver (host, container, pod, VM, SSH, cloud).
"""

from __future__ import annotations

from typing import Any

from .machines.base import cpu_list

# One command for every guest: `cat` is in every image, and both files are readable without root.
# /sys/devices/system/cpu/online is the kernel's online CPUs, not a cgroup's or cpuset's share.
_ARGV = ["cat", "/proc/sys/kernel/random/boot_id", "/sys/devices/system/cpu/online"]


def parse(text: str) -> dict[str, Any] | None:
    """`cat boot_id cpu/online` -> {"boot_id", "kernel_cpus"}, or None when unreadable (pure)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != 2 or len(lines[0]) != 36:
        return None
    cpus = len(cpu_list(lines[1]))
    return {"boot_id": lines[0], "kernel_cpus": cpus} if cpus else None


def read(inst: Any) -> dict[str, Any] | None:
    """The kernel `inst` runs on, read inside it; None when it cannot be read (the caller falls
    back to what the instance's traits say)."""
    try:
        res = inst.exec(_ARGV, timeout=30)
    except Exception:  # an instance that cannot run one more command: no kernel facts, not a failure
        return None
    return parse(res.stdout) if res.ok else None
