"""A sandbox's CPU and memory read from its machine (drivers.base.HostSideMonitoring): where its
cgroup is, and one trace of it merged with what the sampler inside it saw.

gVisor shows no cgroup files inside its sandbox and zero CPU time in /proc/stat, so vb-monitor inside
gets network and disk but no CPU or memory. On the machine, the sandbox's processes (gVisor's sentry,
gofer and the workload's stubs) sit in the container's cgroup: vb-monitor there with `--scope cgroup
--cgroup-root DIR` reads it, DIR being a directory of links, one per v1 controller, to the sandbox's
own cgroup (vb-monitor reads v1 files as DIR/<controller>/<file>), or the v2 cgroup itself.

Pure functions, tested on captured /proc/PID/cgroup and vb-monitor output.
"""

from __future__ import annotations

from .series import Trace

MOUNT = "/sys/fs/cgroup"
# vb-monitor tick keys the host side gives (the rest, network and disk, come from inside: from the
# machine, a cgroup v1 has no per-cgroup I/O counter and /proc/net/dev is the machine's).
HOST_KEYS = ("cpu_util", "cpu_user", "cpu_system", "cpu_iowait", "cpu_steal", "cpu_idle", "cpu_cores",
             "cpu_throttled", "mem_used", "mem_cache", "swap_used")
HOST_GROUPS = ("cpu", "memory")
SCOPE = "host side (the sandbox's cgroup) + inside"  # CPU and memory read on the machine, network and disk inside


def cgroup_root(proc_cgroup: str, mount: str = MOUNT) -> tuple[str, list[tuple[str, str]]]:
    """/proc/PID/cgroup of a sandbox process -> ("v1", [(link name, target)]) for a directory of
    links vb-monitor can take as --cgroup-root, or ("v2", [("", the cgroup's directory)]) when its CPU
    and memory controllers are v2 only. ValueError when neither is there."""
    links: list[tuple[str, str]] = []
    unified = None
    for line in proc_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            unified = path
            continue
        if controllers.startswith("name="):
            continue
        target = f"{mount}/{controllers}{path.rstrip('/')}" if path != "/" else f"{mount}/{controllers}"
        names = controllers.split(",")
        for name in dict.fromkeys([*names, controllers]):
            links.append((name, target))
    if any(n in ("cpuacct", "memory") for n, _ in links):
        return "v1", links
    if unified is not None:
        return "v2", [("", f"{mount}{unified.rstrip('/')}" if unified != "/" else mount)]
    raise ValueError("no cpuacct or memory cgroup and no unified one in /proc/PID/cgroup")


def merge(host: Trace, inside: Trace | None, why: str) -> Trace:
    """One trace of a sandbox: CPU and memory from the host side, network and disk from inside
    (when that sampler ran), every source saying where it was read."""
    out = Trace(host.name, host.role, scope=SCOPE, capacity=host.capacity, interval=host.interval,
                mem_limit=host.mem_limit, end_reason=host.end_reason)
    for group in HOST_GROUPS:
        out.sources[group] = f"host side, {host.sources.get(group, '?')} ({why})"
    ticks = [{k: v for k, v in t.items() if k in ("type", "t", "dt", *HOST_KEYS)} for t in host.ticks]
    if inside is not None:
        for group in ("network", "disk"):
            out.sources[group] = f"inside, {inside.sources.get(group, '?')}"
        ticks += [{k: v for k, v in t.items() if k not in HOST_KEYS} for t in inside.ticks]
    else:
        for group in ("network", "disk"):
            out.sources[group] = "unavailable (the sampler inside did not run)"
    out.ticks = sorted(ticks, key=lambda t: float(t["t"]))
    return out
