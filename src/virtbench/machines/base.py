"""The executor seam: one small interface for "a machine I can act on".

Drivers, conditions, clusters and the monitor act through the `Machine` of the place they act on,
so *where* a thing runs is a choice of executor (local or SSH), never a copy of a driver. Modelled
on Ansible's connection plugins (exec, put, fetch) and hyperfine's executor.
"""

from __future__ import annotations

import contextlib
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..model import ExecResult

if TYPE_CHECKING:  # the ability's type only; hostdirs is this machine's process directory
    from ..hostdirs import ProcessDir

# One fixed script (no parameters in it) that reports what every result records of its machine.
# cores: the CPUs a process there may use (nproc), never an OpenMP setting nproc would also obey.
FACTS_SCRIPT = r"""
echo "arch=$(uname -m)"
echo "kernel=$(uname -r)"
echo "hostname=$(uname -n)"
echo "cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 0)"
m=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
echo "cpu_model=$m"
echo "memory_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)"
echo "home=$HOME"
"""


# The temporary names virtbench makes on a machine start with this (hostdirs.PREFIX is the same).
TMP_PREFIX = "virtbench-cond-"

# Kills the processes whose environment or command line holds one of the strings read on stdin
# (never from arguments: this script's own command line must not match). Command lines count
# because some daemons (sshd) overwrite their environment with their process title.
KILL_MATCHING = r"""
pats=$(cat)
find() { printf '%s\n' "$pats" | grep -lzF -f - /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null |
  sed 's|^/proc/||; s|/.*$||' | sort -u | grep -vx "$$"; }
pids=$(find); [ -n "$pids" ] || exit 0
kill -TERM $pids 2>/dev/null; sleep 0.3
pids=$(find); [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
exit 0
"""

# Start argv in its own session, output to a log, print its pid: $1 cwd, $2 log, then env pairs and argv.
SPAWN = ('d=$1; log=$2; shift 2; if [ -n "$d" ]; then cd "$d" || exit 126; fi; '
          'setsid env "$@" >"$log" 2>&1 </dev/null & echo $!')
# SIGTERM a process group, SIGKILL it after $2 tenths of a second: $1 pgid.
KILL_GROUP = ('g=$1; n=$2; kill -TERM "-$g" 2>/dev/null || exit 0; i=0; '
              # alive = a process of the group that is not a zombie (init may reap late)
              'alive() { ps -e -o pgid=,stat= | awk -v g="$g" \'$1 == g && $2 !~ /^Z/ {f = 1} END {exit !f}\'; }; '
              'while alive && [ "$i" -lt "$n" ]; do sleep 0.1; i=$((i+1)); done; '
              'alive && kill -KILL "-$g" 2>/dev/null; exit 0')

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


class Forwards(Protocol):
    """A machine's ability to make what listens on it reachable from this controller."""

    def forward(self, remote_host: str, remote_port: int) -> tuple[str, int]:
        """(host, port) here reaching remote_host:remote_port as the machine sees it."""

    def forward_unix(self, remote_path: str) -> str:
        """A path here reaching the machine's UNIX socket `remote_path`."""

    def cancel_forward(self, local: tuple[str, int] | str) -> None:
        """Remove a forward made by forward() (its address) or forward_unix() (its path)."""


class DirectForwards:
    """The controller's own machine: what listens there is already reachable here as it is."""

    def forward(self, remote_host: str, remote_port: int) -> tuple[str, int]:
        return remote_host, remote_port

    def forward_unix(self, remote_path: str) -> str:
        return remote_path

    def cancel_forward(self, local: tuple[str, int] | str) -> None:
        """Nothing was added."""


class Machine(ABC):
    """A place where commands run: this machine, or a remote one over SSH.

    A kind implements the primitives (run, put, get, spawn, kill_group; connect and close where
    there is a connection) and declares what differs in meaning as data: `is_local`, `process_dir`,
    `forwards`. Every convenience is written once, here, as commands through those primitives, so
    a caller never asks where a machine is."""

    kind: str = "abstract"
    # The controller itself: its files, processes and ports are this process's (a path here is the
    # same file there, so staged/fetched use it as it is). Only LocalMachine.
    is_local: bool = False
    # Processes spawned here are children of this Python process (so they can be tied to it).
    spawns_children: bool = False
    # How often to poll a helper's log or state: a command here costs a round trip.
    poll_interval: float = 0.05
    # virtbench's directory there as its inventory sets it (virtbench_dir); None: the default.
    virtbench_dir: str | None = None
    # Abilities only some kinds have (None elsewhere; callers check): this process's own directory
    # on the machine (scratch root, ledger, container mount dirs: this machine only), and port
    # forwards to this controller (this machine as it is, SSH hosts over their connection).
    process_dir: ProcessDir | None = None
    forwards: Forwards | None = None

    def __init__(self, name: str, address: str | None = None):
        self.name = name          # inventory name; "localhost" for this machine
        self.address = address    # an address peers can reach it on, when known
        self._facts: dict[str, Any] | None = None
        self._root: bool | None = None

    @classmethod
    def from_host(cls, spec: Any) -> Machine:
        """This kind of machine for an inventory host (a HostSpec), as factory.machine_for makes it."""
        return cls(spec)

    @property
    def reached_via(self) -> str | None:
        """What this controller reaches the machine's ports through, for a result's notes (None: directly)."""
        return None

    @property
    def on(self) -> str:
        """' on <name>' for messages about another machine, '' for this one."""
        return "" if self.is_local else f" on {self.name}"

    @property
    def place(self) -> str:
        """How messages name the machine: its name, or 'the host' for this one."""
        return "the host" if self.is_local else self.name

    # -- the primitives ------------------------------------------------------------------------------

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

    # -- processes -----------------------------------------------------------------------------------

    def exited(self, pgid: int) -> bool:
        """Has the process group `pgid` (spawned here) gone?"""
        return not Process(self, pgid, "").alive()

    def kill_matching(self, patterns: Sequence[str]) -> None:
        """Kill every process whose environment or command line contains one of `patterns`."""
        self.run(["sh", "-c", KILL_MATCHING], stdin="\n".join(patterns).encode(), timeout=20)

    def spawn_tethered(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None) -> Process:
        """spawn(), and where the process is a child of this one, make it die with this process
        (even on SIGKILL). Elsewhere there is no parent to tie it to: the caller stops it (and marks
        it, with `env`, for the ledger's sweep after a SIGKILL)."""
        return self.spawn(argv, log, env=env)

    def free_port(self) -> int:
        """A TCP port on the machine's 127.0.0.1 that is probably free: the caller retries on a
        collision (there is no race-free way to ask from outside)."""
        return 20000 + secrets.randbelow(40000)

    # -- files (commands on the machine) -------------------------------------------------------------

    def read_text(self, path: str | Path) -> str:
        """The file's text, '' when it cannot be read."""
        return self.run(["cat", "--", str(path)], timeout=30).stdout

    def write_text(self, path: str | Path, text: str, mode: int | None = None) -> None:
        argv = ["sh", "-c", 'cat > "$1" && { [ -z "$2" ] || chmod "$2" "$1"; }', "vb", str(path),
                "" if mode is None else f"{mode:o}"]
        self._check(self.run(argv, stdin=text.encode(), timeout=60), f"writing {path}")

    def exists(self, path: str | Path) -> bool:
        return self.run(["test", "-e", str(path)], timeout=30).ok

    def makedirs(self, path: str | Path) -> None:
        self._check(self.run(["mkdir", "-p", str(path)], timeout=60), f"making {path}")

    def remove(self, *paths: str | Path) -> None:
        """Remove files (one command for all); a missing one is no error."""
        self.run(["rm", "-f", "--", *map(str, paths)], timeout=30)

    def rmtree(self, *paths: str | Path) -> None:
        """rm -r that stays on one file system (one command for all); what cannot be removed stays,
        silently."""
        self.run(["rm", "-rf", "--one-file-system", "--", *map(str, paths)], timeout=120)

    def fsync(self, path: str | Path) -> None:
        """The file's data on disk, not just in the page cache (`sync FILE` fsyncs it)."""
        self._check(self.run(["sync", str(path)], timeout=600), f"sync of {path}")

    def file_size(self, path: str | Path) -> int:
        res = self.run(["stat", "-L", "-c", "%s", str(path)], timeout=60)  # -L: what os.stat says
        if not res.ok or not res.stdout.strip().isdigit():
            raise OSError(f"stat of {path}{self.on}: {res.describe_failure()}")
        return int(res.stdout.strip())

    def scratch_dir(self, kind: str) -> str:
        """A fresh directory for this process's files of one kind; the caller removes it (rmtree).
        Under the process's own directory where the machine has one, else a mktemp directory (the
        caller puts an owner file beside it)."""
        if self.process_dir is not None:
            return self.process_dir.new_dir(kind)
        return self._mktemp(["-d", "-t", f"{TMP_PREFIX}{kind}.XXXXXX"])

    def scratch_file(self, kind: str) -> str:
        """A fresh file name for this process (e.g. a helper's log); the caller removes it."""
        if self.process_dir is not None:
            return self.process_dir.new_file(kind)
        return self._mktemp(["-t", f"{TMP_PREFIX}{kind}.XXXXXX"])

    def _mktemp(self, args: list[str]) -> str:
        res = self.run(["mktemp", *args], timeout=60)
        self._check(res, "mktemp")
        return res.stdout.strip()

    def _check(self, res: ExecResult, what: str) -> None:
        if not res.ok:
            raise OSError(f"{what}{self.on}: {res.describe_failure()}")

    @contextlib.contextmanager
    def staged(self, src: Path) -> Iterator[str]:
        """The local file `src` as a path on the machine, for a command there to read: on this
        controller's own machine the file itself, elsewhere a copy removed after."""
        if self.is_local:
            yield str(src)
            return
        tmp = self.scratch_dir("stage")
        try:
            self.put(src, f"{tmp}/f")
            yield f"{tmp}/f"
        finally:
            self.run(["rm", "-rf", "--", tmp], timeout=60)

    @contextlib.contextmanager
    def fetched(self, dest: Path) -> Iterator[str]:
        """A path on the machine for a command there to write the local file `dest`: on this
        controller's own machine `dest` itself; elsewhere a path copied to `dest` when the block
        ends without an error, then removed."""
        if self.is_local:
            yield str(dest)
            return
        tmp = self.scratch_dir("fetch")
        try:
            yield f"{tmp}/f"
            self.get(f"{tmp}/f", dest)
        finally:
            self.run(["rm", "-rf", "--", tmp], timeout=60)

    def private_workdir(self) -> str | None:
        """A directory of this user's to start tools in, so what they drop in their working directory
        lands there (None: wherever commands start on the machine)."""
        return None

    # -- what the machine is -------------------------------------------------------------------------

    def missing_programs(self, programs: Sequence[str]) -> list[str]:
        """Those of `programs` not on the machine's PATH (one command for all)."""
        res = self.run(["sh", "-c", 'for t; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done', "sh",
                        *programs], timeout=30)
        return [p for p in res.stdout.split() if p in programs]

    def which(self, program: str) -> bool:
        """Is `program` on the machine's PATH? (False also when the machine cannot be asked)"""
        return self.run(["sh", "-c", 'command -v "$1"', "vb", program], timeout=60).ok

    def mountinfo(self) -> str:
        """/proc/self/mountinfo of the machine's sessions ('' if unreadable)."""
        return self.read_text("/proc/self/mountinfo")

    def is_root(self) -> bool:
        if self._root is None:
            self._root = self.run(["id", "-u"], timeout=30).stdout.strip() == "0"
        return self._root

    def cpu_count(self) -> int:
        """CPUs of the machine (at least 1): its facts' `cores`."""
        return self.facts().get("cores") or 1

    def allowed_cpus(self) -> list[int]:
        """The CPUs a process started there may run on."""
        text = self.read_text("/proc/self/status")
        for line in text.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return cpu_list(line.partition(":")[2])
        return list(range(self.cpu_count()))

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


def cpu_list(text: str) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5] (the kernel's CPU list format; pure)."""
    out: list[int] = []
    for item in text.strip().split(","):
        lo, _, hi = item.partition("-")
        if lo.strip().isdigit():
            out += range(int(lo), int(hi or lo) + 1)
    return out


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
