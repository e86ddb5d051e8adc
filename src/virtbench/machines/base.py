"""The executor seam: one small interface for "a machine I can act on".

Drivers, conditions, clusters and the monitor act through the `Machine` of the place they act on,
so *where* a thing runs is a choice of executor (local or SSH), never a copy of a driver. Modelled
on Ansible's connection plugins (exec, put, fetch) and hyperfine's executor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model import ExecResult

# One fixed script (no parameters in it) that reports what every result records of its machine.
FACTS_SCRIPT = r"""
echo "arch=$(uname -m)"
echo "kernel=$(uname -r)"
echo "hostname=$(uname -n)"
echo "cores=$(nproc 2>/dev/null || echo 0)"
m=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
echo "cpu_model=$m"
echo "memory_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)"
echo "home=$HOME"
"""


_GROUP_ALIVE = "ps -e -o pgid=,stat= | awk -v g=\"$1\" '$1 == g && $2 !~ /^Z/ {f = 1} END {exit !f}'"


class MachineUnreachable(Exception):
    """The machine cannot be acted on at all (connection refused, host key mismatch, ...)."""

    def __init__(self, machine: str, reason: str):
        super().__init__(f"{machine}: {reason}")
        self.machine = machine
        self.reason = reason


@dataclass
class Process:
    """A background process started on a machine with `Machine.spawn`."""

    machine: "Machine"
    pgid: int
    log: str  # path on the machine where its stdout and stderr go
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        """A process of the group is still there and not a zombie (init may not have reaped it yet)."""
        return self.machine.run(["sh", "-c", _GROUP_ALIVE, "vb", str(self.pgid)], timeout=30).ok

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `grace` seconds; safe to repeat."""
        self.machine.kill_group(self.pgid, grace)


class Machine(ABC):
    """A place where commands run: this machine, or a remote one over SSH."""

    kind: str = "abstract"

    def __init__(self, name: str, address: str | None = None):
        self.name = name          # inventory name; "localhost" for this machine
        self.address = address    # an address peers can reach it on, when known
        self._facts: dict[str, Any] | None = None

    @property
    def is_local(self) -> bool:
        return False

    @abstractmethod
    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        """Run an argument list (never a shell string); on timeout kill its whole process group."""

    @abstractmethod
    def put(self, src: Path, dest: str, mode: int | None = None) -> None:
        """Copy a local file to `dest` on the machine (its parent must exist)."""

    @abstractmethod
    def get(self, src: str, dest: Path) -> None:
        """Copy a file of the machine to the local path `dest`."""

    @abstractmethod
    def spawn(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        """Start argv in the background in a process group of its own, output to `log` there."""

    @abstractmethod
    def kill_group(self, pgid: int, grace: float = 2.0) -> None:
        """SIGTERM, then SIGKILL, a process group on the machine."""

    def connect(self) -> None:
        """Make sure the machine can be acted on; raises MachineUnreachable with the reason."""

    def close(self) -> None:
        """Release connections; the machine itself stays as it is."""

    def facts(self) -> dict[str, Any]:
        """arch, kernel, hostname, cores, cpu_model, memory_mb, home (cached)."""
        if self._facts is None:
            res = self.run(["sh", "-c", FACTS_SCRIPT], timeout=60)
            if not res.ok:
                raise MachineUnreachable(self.name, res.describe_failure())
            self._facts = parse_facts(res.stdout)
        return self._facts

    def describe(self) -> dict[str, Any]:
        """What a result records of the machine it ran on (no key material, no user names)."""
        f = self.facts()
        return {"name": self.name, "kind": self.kind, "kernel": f.get("kernel"), "cpu_model": f.get("cpu_model"),
                "cores": f.get("cores"), "arch": f.get("arch")}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def parse_facts(text: str) -> dict[str, Any]:
    """FACTS_SCRIPT's key=value lines -> a dict with numbers where numbers belong (pure)."""
    raw = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            raw[k.strip()] = v.strip()
    out: dict[str, Any] = {k: raw.get(k, "") for k in ("arch", "kernel", "hostname", "cpu_model", "home")}
    out["cores"] = int(raw["cores"]) if raw.get("cores", "").isdigit() else None
    kb = raw.get("memory_kb", "")
    out["memory_mb"] = int(kb) // 1024 if kb.isdigit() else None
    return out
