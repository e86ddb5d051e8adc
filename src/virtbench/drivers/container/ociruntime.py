"""The OCI runtime a container environment asks for (`runtime = "runc" | "crun" | "runsc" | PATH`) and
its options (gVisor's `platform` and `network`): validating them, finding the binary and its
version on the engine's machine, the flags the engine passes, the words a report labels it with,
and the hint for a runtime that does not start.

Why a module of its own: the container driver, the engine probe, `doctor` and the report all need
the same answers, and a runtime named explicitly must either run or fail with its own reason (the
engine never falls back to another runtime behind the user's back).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import MissingTool, UserError
from ...machines import Machine

AUTO = "auto"
KNOWN = ("runc", "crun", "runsc")
# Debian packages that bring each runtime.
PACKAGES = {"runc": "runc", "crun": "crun", "runsc": "runsc"}
LABELS = {"runc": "runc", "crun": "crun", "runsc": "gVisor runsc"}
# gVisor's platforms (how the sentry intercepts the workload's system calls) and network modes.
GVISOR_PLATFORMS = ("ptrace", "systrap", "kvm")
# sandbox: gVisor's own network stack (netstack) on the container's interface; host: gVisor passes
# socket calls to the kernel of the network namespace the engine made (hostinet); none: loopback only.
# auto: sandbox where it starts, else host, the choice and the reason recorded with every sample.
GVISOR_NETWORKS = (AUTO, "sandbox", "host", "none")
DEFAULT_PLATFORM = "ptrace"
# Why a gVisor container's CPU and memory series are read outside it (monitor: HostSideMonitoring).
NO_COUNTERS_INSIDE = ("gVisor mounts no cgroup files inside its sandbox and its /proc/stat shows no CPU time, "
                      "so CPU and memory are the sandbox's cgroup on its machine: the workload plus gVisor's "
                      "sentry and gofer")


# What gVisor's runsc release 20221219 (Debian 12) could not run here (docs/runtimes.md), by kind of
# workload and the network mode it fails under (None: any): said before the workload starts, so its
# failure reads as the runtime's, not as a tool's puzzling error. Other releases are tried.
TRIED_RELEASE = "0.0~20221219.0"
CANNOT_RUN = {  # (what, network) -> why; `what` is said after "cannot run"
    ("iperf3 server", "host"): (
        "with network = \"host\" a blocking read on a freshly accepted TCP connection can return EAGAIN before the "
        "client's data arrives (seen with a ten-line Python server too), so iperf3's server stops with "
        "\"unable to receive parameters from client: Resource temporarily unavailable\""),
    ("sockperf server", "host"): (
        "with network = \"host\" sockperf's server fails its recvfrom() on the accepted TCP connection "
        "(\"Failed receiving on fd[4] (errno=22 Invalid argument)\") and its client sees the connection closed"),
    ("MPI", None): (
        "hwloc finds no CPU topology in gVisor's /sys (\"topology discovery failed\"), and with a synthetic "
        "topology (HWLOC_SYNTHETIC) Open MPI's PMIx server does not start its listener"),
}


def cannot_run(meta: dict, what: str) -> str:
    """Why an instance (its metadata: runtime, runtime_version, runtime_options) cannot run `what` (a key
    of CANNOT_RUN), with what to do; '' when it can or when nobody tried (another runtime or release)."""
    options = meta.get("runtime_options") or {}
    if kind(str(meta.get("runtime") or "")) != "runsc" or meta.get("runtime_version") != TRIED_RELEASE:
        return ""
    for (name, network), why in CANNOT_RUN.items():
        if name == what and network in (None, options.get("network")):
            return (f"gVisor runsc {TRIED_RELEASE} cannot run {what} here: {why} (docs/runtimes.md); "
                    f"use runtime = \"runc\"" + ("" if network is None else
                                                 ", or a runsc whose own network stack starts (network = \"sandbox\")"))
    return ""


def kind(runtime: str) -> str:
    """What a runtime value is: 'runc', 'crun', 'runsc' (a path's file name decides) or '' (unknown)."""
    base = runtime.rsplit("/", 1)[-1]
    return next((k for k in KNOWN if base == k or base.startswith(k + "-") or base.startswith(k + ".")), "")


def option_problems(options: dict) -> list[tuple[str, str, tuple | None]]:
    """(key, problem, valid choices) for a container environment's runtime options; [] when valid.
    The suite loader reports each at its file, line and key."""
    out: list[tuple[str, str, tuple | None]] = []
    runtime = options.get("runtime", AUTO)
    if not isinstance(runtime, str) or not runtime:
        return [("runtime", f"invalid value {runtime!r}", (AUTO, *KNOWN, "/absolute/path/to/runtime"))]
    if runtime not in (AUTO, *KNOWN) and not runtime.startswith("/"):
        out.append(("runtime", f"unknown runtime {runtime!r}: give one of these or the absolute path of an "
                               "OCI runtime binary", (AUTO, *KNOWN, "/absolute/path/to/runtime")))
    gvisor = kind(runtime) == "runsc"
    for key, choices in (("platform", GVISOR_PLATFORMS), ("network", GVISOR_NETWORKS)):
        value = options.get(key, "")
        if value in ("", None):
            continue
        if not gvisor:
            out.append((key, f"{key} is an option of gVisor's runsc; runtime {runtime!r} takes none "
                             "(remove it, or set runtime = \"runsc\")", None))
        elif value not in choices:
            out.append((key, f"invalid value {value!r}", choices))
    return out


@dataclass(frozen=True)
class Choice:
    """What an environment asked for: the runtime and, for gVisor, its platform and network."""

    runtime: str = AUTO
    platform: str = ""
    network: str = ""

    @classmethod
    def of(cls, options: dict) -> Choice:
        return cls(options.get("runtime") or AUTO, options.get("platform") or "", options.get("network") or "")

    @property
    def gvisor(self) -> bool:
        return kind(self.runtime) == "runsc"

    def networks(self) -> list[str]:
        """gVisor network modes to try, in order; [''] for runtimes without one."""
        if not self.gvisor:
            return [""]
        return ["sandbox", "host"] if self.network in ("", AUTO) else [self.network]

    def options(self, network: str) -> dict[str, str]:
        """The runtime's options as recorded with every sample ({} for runc and crun)."""
        if not self.gvisor:
            return {}
        return {"platform": self.platform or DEFAULT_PLATFORM, "network": network}


def resolve(machine: Machine, runtime: str) -> str:
    """The runtime's binary on `machine` (its absolute path), or MissingTool / UserError saying why."""
    if runtime.startswith("/"):
        if not machine.run(["test", "-x", runtime], timeout=30).ok:
            raise UserError(f"runtime {runtime} is not an executable file{machine.on}",
                            "give the absolute path of an OCI runtime binary there, or runc, crun or runsc")
        return runtime
    res = machine.run(["sh", "-c", 'command -v "$1"', "vb", runtime], timeout=60)
    path = res.stdout.strip()
    if not res.ok or not path:
        raise MissingTool(runtime, PACKAGES.get(runtime, runtime),
                          f"the OCI runtime this container environment asks for{machine.on}")
    return path


def version(machine: Machine, path: str) -> str:
    """'1.1.5+ds1', '1.8.1', '0.0~20221219.0': the word after 'version' in `PATH --version`."""
    res = machine.run([path, "--version"], timeout=60)
    return parse_version(res.stdout + "\n" + res.stderr)


def parse_version(text: str) -> str:
    m = re.search(r"\bversion\s+(\S+)", text)
    return m.group(1) if m else ""


def engine_flags(path: str, options: dict[str, str]) -> list[str]:
    """podman's global flags that select the runtime and pass its options."""
    flags = ["--runtime", path]
    for key in ("platform", "network"):
        if options.get(key):
            flags += ["--runtime-flag", f"{key}={options[key]}"]
    return flags


def label(runtime: str, options: dict | None) -> str:
    """'gVisor runsc, ptrace, network host' / 'runc': how reports name a runtime."""
    if not runtime:
        return ""
    words = [LABELS.get(kind(runtime), runtime)]
    options = options or {}
    if options.get("platform"):
        words.append(options["platform"])
    if options.get("network"):
        words.append(f"network {options['network']}")
    return ", ".join(words)


def hint(runtime: str, failure: str, version_text: str = "") -> str:
    """What to do about a runtime that does not start, from its own words."""
    low = failure.lower()
    name = kind(runtime) or runtime
    if "hybrid mode not supported" in low:
        return (f"{name} {version_text} does not run on a machine whose cgroups are in hybrid mode "
                "(cgroup v1 with a v2 mount); use runtime = \"runc\" here, or boot the machine with "
                "the unified cgroup v2 hierarchy (systemd.unified_cgroup_hierarchy=1)").replace("  ", " ")
    if "root network namespace" in low:
        return ("this gVisor release takes any network namespace with /proc/sys/net/core/rmem_default for the "
                "root one, and newer kernels show that file in every namespace, so its own network stack "
                "(network = \"sandbox\") cannot start here: use network = \"host\" (gVisor passes socket calls "
                "to the kernel of the container's own network namespace) or a newer runsc")
    if "unknown platform" in low:
        return (f"this runsc release ({version_text or 'unknown'}) does not have that platform "
                "(systrap came with gVisor releases of mid-2023); use platform = \"ptrace\"")
    if "timed out" in low or "timeout" in low:
        return "the runtime did not start a container in time; try platform = \"ptrace\" (gVisor) or runtime = \"runc\""
    return "run the engine with this runtime by hand to see its log, or choose runtime = \"runc\""


# PSS (proportional set size: shared pages split between their users, so sums add up) of each pid.
_PSS = 'for p; do printf "%s " "$p"; awk \'/^Pss:/ {print $2; f=1} END {if (!f) print 0}\' /proc/$p/smaps_rollup 2>/dev/null || echo 0; done'


def footprint(machine: Machine, conmon_pid: int) -> dict[str, int]:
    """Memory of one container on its machine, in kB of PSS, by who holds it: the engine's monitor
    (conmon), the runtime's own processes that stay (gVisor: its sentry, `runsc-sandbox`, and its
    file server, `runsc-gofer`; runc and crun exit once the container runs) and the workload's: its
    processes (runc, crun), or under gVisor's ptrace platform the stub processes that hold its
    address spaces (the pages themselves are the sentry's memory file, so PSS splits them between
    sentry and stubs). {} when it cannot be read (docker: no conmon)."""
    res = machine.run(["ps", "-eo", "pid=,ppid=,args="], timeout=30)
    if not res.ok or conmon_pid <= 0:
        return {}
    children: dict[int, list[int]] = {}
    args: dict[int, str] = {}
    for line in res.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
            args[int(parts[0])] = parts[2] if len(parts) > 2 else ""
    tree, todo = [], [conmon_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    pss = machine.run(["sh", "-c", _PSS, "vb", *map(str, tree)], timeout=30)
    if not pss.ok:
        return {}
    out = {"conmon": 0, "runtime": 0, "workload": 0}
    for line in pss.stdout.splitlines():
        pid, _, kb = line.partition(" ")
        if not pid.isdigit() or not kb.strip().isdigit():
            continue
        first = args.get(int(pid), "").split(" ", 1)[0].rsplit("/", 1)[-1]
        who = "conmon" if int(pid) == conmon_pid else "runtime" if kind(first) or first.startswith("runsc") \
            else "workload"
        out[who] += int(kb.strip())
    out["total"] = sum(out.values())
    return out
