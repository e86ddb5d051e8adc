"""How much CPU this machine gave a run, measured around each repetition (issue 24, item 8).

The 1-minute load average lags: repetitions whose throughput halved recorded a load of 1.52. These
figures cover exactly the repetition's window instead, from three sources:

- `/proc/stat`: the machine's busy and steal time (steal: what a hypervisor gave to other guests);
- the run's own processes' CPU time (`/proc/PID/stat`: this process, its descendants, and
  processes whose command line names the run, such as a container's conmon, whose parent is not
  us, with their descendants; their reaped children's time only in our own tree); a container's
  processes are counted by its cgroup's CPU usage
  instead (cpuacct.usage, or cpu.stat on cgroup v2), because a `podman exec` session starts and
  ends inside the window under a conmon that init reaps, taking its CPU time out of any tree;
  `others_cores` = the machine's busy time minus the run's, in cores' worth of CPU over the
  window: what other programs took; `containers_cores` = the part of the run's that its
  containers' cgroups used: what a container's CPU quota (`cpus`) governs, where `own_cores` also
  holds the engine's exec machinery and virtbench's own process, which no quota limits (about half
  of a 0.3 s test's repetition in a container here, enough to hide a 10 % quota);
- the kernel's pressure-stall information for CPU (`/proc/pressure/cpu`, Linux 4.20+ with PSI on):
  the share of the window in which some runnable task waited for a CPU.

Linux only; elsewhere (or where /proc cannot be read) `snapshot()` returns None and nothing is
recorded.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Snapshot:
    t: float  # monotonic seconds
    busy: float  # machine CPU seconds not idle (steal excluded), all CPUs
    steal: float  # CPU seconds stolen by the hypervisor, all CPUs
    # CPU seconds of the run's processes, ours each with its reaped children: a child that ends inside
    # the window moves its time into its parent's, so the sum only grows by what was spent
    own: float
    psi_some_us: int | None  # /proc/pressure/cpu "some" total, microseconds
    # cgroup path -> CPU seconds used in it: the cgroups (containers) of the marked processes' descendants
    groups: dict[str, float] = field(default_factory=dict)


def _proc_stat(root: Path) -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot."""
    try:
        line = (root / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if line[0] != "cpu":
        return None
    v = [int(x) for x in line[1:]] + [0] * 10
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]  # guest time is inside user/nice
    return (user + nice + system + irq + softirq) / CLOCK_TICKS, steal / CLOCK_TICKS


def _psi_some(root: Path) -> int | None:
    try:
        for line in (root / "pressure" / "cpu").read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _processes(root: Path) -> dict[int, tuple[int, float, float]]:
    """pid -> (ppid, its own CPU seconds, CPU seconds of its reaped children)."""
    out = {}
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
        try:
            ppid = int(fields[1])
            mine = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime stime
            reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS  # cutime cstime
        except (IndexError, ValueError):
            continue
        out[int(entry.name)] = (ppid, mine, reaped)
    return out


def _named(root: Path, pids, markers: tuple[str, ...]) -> set[int]:
    found = set()
    for pid in pids:
        try:
            cmd = (root / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in markers):
            found.add(pid)
    return found


def _cgroup_of(root: Path, pid: int) -> str | None:
    """The process's cpuacct cgroup (cgroup v1), else its unified one (v2)."""
    try:
        lines = (root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return "cpuacct:" + path
        if controllers == "":
            unified = "unified:" + path
    return unified


def _below(group: str, home: str) -> bool:
    """A cgroup of its own: neither the marked process's nor one of its ancestors (a helper such as
    podman's cleanup, which conmon starts in the root cgroup, would count the whole machine)."""
    kind, path = group.split(":", 1)
    home_kind, home_path = home.split(":", 1)
    path, home_path = path.rstrip("/") + "/", home_path.rstrip("/") + "/"
    return kind == home_kind and path != "/" and not home_path.startswith(path)


def _cgroup_cpu(cgroot: Path, group: str) -> float | None:
    """CPU seconds used in a cgroup so far (``"cpuacct:/path"`` or ``"unified:/path"``)."""
    kind, path = group.split(":", 1)
    try:
        if kind == "cpuacct":
            return int((cgroot / "cpuacct" / path.lstrip("/") / "cpuacct.usage").read_text()) / 1e9
        for base in (cgroot / path.lstrip("/"), cgroot / "unified" / path.lstrip("/")):
            stat = base / "cpu.stat"
            if stat.exists():
                for line in stat.read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
    except (OSError, ValueError):
        return None
    return None


def snapshot(markers: tuple[str, ...] = (), *, root: Path = Path("/proc"), me: int | None = None,
             cgroot: Path = Path("/sys/fs/cgroup")) -> Snapshot | None:
    """The machine's counters now. `markers`: strings that mark a process as the run's own when its
    command line contains one (with its descendants)."""
    stat = _proc_stat(root)
    if stat is None:
        return None
    procs = _processes(root)
    me = os.getpid() if me is None else me
    roots = {me} | (_named(root, [p for p in procs if p != me], markers) if markers else set())
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in procs.items():
        children.setdefault(ppid, []).append(pid)
    own: set[int] = set()
    groups: dict[str, float] = {}
    in_group: set[int] = set()
    # Reaped children's CPU counts only in our own tree. A marked process's reaped children ran in a
    # container's cgroup, counted there: a podman exec session's conmon reaps the test and is often
    # still alive when `podman exec` returns, so its cutime would count the test twice (measured:
    # own_cores 1.42 for a container capped at 1.0 core, and a hog's 0.5 core read as ours).
    reaping: set[int] = set()
    for r in roots:
        if r not in procs:
            continue
        home = _cgroup_of(root, r) if r != me else None  # None: our own tree, counted by process
        todo = [r]
        while todo:
            pid = todo.pop()
            if pid in own:
                continue
            own.add(pid)
            if home is None:
                reaping.add(pid)
            todo += children.get(pid, [])
            if home is not None and pid != r:  # a marked process's descendant in a cgroup of its own
                group = _cgroup_of(root, pid)
                if group and _below(group, home):
                    if group not in groups:
                        used = _cgroup_cpu(cgroot, group)
                        if used is None:
                            continue
                        groups[group] = used
                    in_group.add(pid)
    cpu = sum(procs[p][1] + (procs[p][2] if p in reaping else 0.0) for p in own - in_group)
    return Snapshot(time.monotonic(), stat[0], stat[1], cpu, _psi_some(root), groups)


def between(a: Snapshot | None, b: Snapshot | None, cores: int | None = None) -> dict[str, float | None] | None:
    """What the machine gave between two snapshots: window seconds, `busy_cores` (machine),
    `own_cores` (the run's processes), `containers_cores` (the part of it in the run's containers'
    cgroups; None: no container), `others_cores` (the rest), `steal` and `psi_some` as shares of the
    window (steal: of all CPUs' time)."""
    if a is None or b is None or b.t <= a.t:
        return None
    window = b.t - a.t
    cores = cores or os.cpu_count() or 1
    busy = max(0.0, b.busy - a.busy)
    groups = sum(max(0.0, b.groups[g] - a.groups[g]) for g in a.groups if g in b.groups)
    own = min(busy, max(0.0, b.own - a.own) + groups)  # tick rounding must not make others negative
    psi = None if a.psi_some_us is None or b.psi_some_us is None else (b.psi_some_us - a.psi_some_us) / 1e6 / window
    return {"window_s": round(window, 4), "busy_cores": round(busy / window, 3),
            "own_cores": round(own / window, 3), "others_cores": round((busy - own) / window, 3),
            "containers_cores": round(groups / window, 3) if a.groups else None,
            "steal": round(max(0.0, b.steal - a.steal) / window / cores, 4),
            "psi_some": None if psi is None else round(min(1.0, max(0.0, psi)), 4)}
