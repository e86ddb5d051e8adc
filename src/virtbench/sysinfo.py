"""System metadata of an instance, gathered from inside it with one fixed shell script."""

from __future__ import annotations

import json
from typing import Any

from .drivers.base import Instance

# Runs inside any instance (host, container, VM): POSIX sh, coreutils, /proc. Prints key=value lines.
SCRIPT = r"""
kv() { printf '%s=%s\n' "$1" "$2"; }
kv cpu_model "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
kv cores "$(nproc 2>/dev/null)"
kv online_cpus "$(grep -c ^processor /proc/cpuinfo)"
kv memory_kb "$(sed -n 's/^MemTotal:[[:space:]]*\([0-9]*\).*/\1/p' /proc/meminfo)"
kv kernel "$(uname -r)"
kv arch "$(uname -m)"
kv os "$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") )"
if command -v systemd-detect-virt >/dev/null 2>&1; then
  kv virt_vm "$(systemd-detect-virt --vm 2>/dev/null)"
  kv virt_container "$(systemd-detect-virt --container 2>/dev/null)"
fi
[ -e /run/.containerenv ] && kv container_marker podman
[ -e /.dockerenv ] && kv container_marker docker
grep -q '^flags.* hypervisor' /proc/cpuinfo && kv cpu_hypervisor_flag yes
kv dmi_product "$(cat /sys/class/dmi/id/product_name 2>/dev/null)"
kv governor "$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null)"
kv cpu_quota "$(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null)")"
kv memory_limit "$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)"
kv boot_id "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
for t in fio sysbench stress-ng iperf3 bonnie++ nginx mpirun; do
  p=$(command -v "$t" 2>/dev/null) && kv "tool_$t" "$p"
done
kv libc "$(getconf GNU_LIBC_VERSION 2>/dev/null)"
exit 0
"""

_INT_KEYS = {"cores", "online_cpus", "memory_kb"}


def parse(output: str) -> dict[str, Any]:
    """key=value lines -> dict; empty values dropped; a `virtualization` summary added."""
    facts: dict[str, Any] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        value = value.strip()
        if not sep or not value:
            continue
        facts[key.strip()] = int(value) if key in _INT_KEYS and value.isdigit() else value
    facts["virtualization"] = virtualization(facts)
    return facts


def virtualization(facts: dict[str, Any]) -> str:
    """Like systemd-detect-virt, but both layers: 'docker on kvm', 'kvm', 'podman', or 'none'."""
    container = next((facts[k] for k in ("virt_container", "container_marker")
                      if facts.get(k) and facts[k] != "none"), None)
    vm = facts.get("virt_vm") if facts.get("virt_vm") not in (None, "none") else None
    if vm is None and facts.get("cpu_hypervisor_flag") == "yes":
        vm = "vm"
    if container and vm:
        return f"{container} on {vm}"
    return container or vm or "none"


def collect(instance: Instance) -> dict[str, Any]:
    """Facts about one instance; a failure to collect is itself recorded, never fatal."""
    res = instance.exec(["sh", "-c", SCRIPT], timeout=60)
    if not res.ok:
        return {"error": res.describe_failure()}
    return parse(res.stdout)


def to_json(facts: dict[str, Any]) -> str:
    return json.dumps(facts, sort_keys=True)
