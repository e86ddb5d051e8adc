"""Containers from the guest image, through podman (or docker where a Docker engine answers).

What works differs between machines (crun vs runc, cgroup v1 vs v2, which ulimits the runtime may
set), so the first provision probes a tiny `run --rm ... true` with candidate settings, keeps the
first that works for the life of the process, and records it in every instance's metadata.

Every engine call goes through the executor of the machine the containers run on (option
`machine`: an inventory host; this machine by default), so probing, the image import and the
caches are per machine. On a remote machine the guest image tarball is shipped once into its
content-addressed blob cache (machines/ship.py) and imported there.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import cpuset, hostdirs, image, procs
from ..errors import ConditionUnavailable, MissingTool, UserError
from ..machines import Machine, MachineUnreachable, local, ship
from ..model import EnvSpec, ExecResult
from .base import Driver, DriverContext, Instance, OptionSpec, Problem, ScratchSpace, Traits

SCRATCH = "/tmp/vb-scratch"
READY_TIMEOUT = 60.0
READY_POLL = 0.02
CLI_TIMEOUT = 120.0
# Rootful podman hands conmon RLIMIT_NPROC 32768 on these machines, so a container cannot be given
# more even when our own hard limit is higher; the last resort is the 1024 that always worked.
NPROC_CAP = 32768

_lock = threading.RLock()
_engines: dict[tuple, Engine] = {}  # (machine name, cmd, tag, runtime, cgroup manager) -> Engine
# (machine name, cmd, tag) of images the engine has (mark_imported: what boot.py and checks.py commit).
_imported: set[tuple] = set()
_names: set[str] = set()


@dataclass(frozen=True)
class Engine:
    """One probed, working way of running containers."""

    cmd: str  # podman | docker
    version: str
    runtime: str
    cgroup_manager: str
    cgroup_version: str
    ulimits: tuple[str, ...]
    init: bool
    forced_runtime: bool = False

    def cli(self) -> list[str]:
        # podman takes runtime and cgroup manager as global flags; pass them on every call so
        # create, exec and rm all agree.
        if self.cmd == "podman":
            return ["podman", "--runtime", self.runtime, "--cgroup-manager", self.cgroup_manager]
        return ["docker"]

    def run_flags(self) -> list[str]:
        flags = [f for u in self.ulimits for f in ("--ulimit", u)]
        if self.init:
            flags.append("--init")
        if self.cmd == "docker" and self.forced_runtime:
            flags += ["--runtime", self.runtime]
        return flags

    def describe(self) -> dict[str, Any]:
        return {"engine": self.cmd, "engine_version": self.version, "runtime": self.runtime,
                "cgroup_manager": self.cgroup_manager, "cgroup_version": self.cgroup_version,
                "ulimits": list(self.ulimits), "init": self.init}


def _run(machine: Machine, argv: Sequence[str], timeout: float | None = CLI_TIMEOUT,
         stdin: bytes | None = None) -> ExecResult:
    return machine.run(argv, timeout=timeout, stdin=stdin)


def _tail(res: ExecResult, lines: int = 3) -> str:
    text = (res.stderr.strip() or res.stdout.strip()).splitlines()[-lines:]
    return " | ".join(text) or res.describe_failure()


_picked: dict[tuple, str] = {}


def pick_engine(choice: str = "auto", machine: Machine | None = None) -> str:
    """podman if installed and answering, else docker if its engine answers. A working answer is
    kept per machine for the process: `podman info` costs about a second, and every provision asks."""
    machine = machine or local()
    try:  # an unreachable host says so, rather than "podman is not installed"
        machine.connect()
    except MachineUnreachable as exc:
        raise UserError(f"cannot reach {machine.name} to run containers there: {exc.reason}",
                        "check the host with: virtbench hosts --inventory FILE") from None
    key = (machine.name, choice, machine.which("podman"), machine.which("docker"))  # a changed PATH asks again
    if key not in _picked:
        _picked[key] = _pick_engine(choice, machine)
    return _picked[key]


def _pick_engine(choice: str, machine: Machine) -> str:
    if choice not in ("auto", "podman", "docker"):
        raise UserError(f"unknown container engine '{choice}'", hint="use auto, podman or docker")
    on = machine.on
    podman_err = None
    if choice in ("auto", "podman") and machine.which("podman"):
        res = _run(machine, ["podman", "info", "--format", "json"], timeout=60)
        if res.ok:
            return "podman"
        podman_err = _tail(res)
    if choice in ("auto", "docker") and machine.which("docker"):
        if _run(machine, ["docker", "info"], timeout=60).ok:
            return "docker"
        if choice == "docker":
            raise UserError(f"the docker client is installed{on} but no Docker engine answers ('docker info' failed)",
                            hint="start the Docker daemon, or use engine = \"podman\"")
    if podman_err:
        raise UserError(f"podman is installed{on} but 'podman info' fails: {podman_err}")
    if choice == "docker":
        raise MissingTool("docker", "docker.io", on.strip())
    raise MissingTool("podman", "podman runc", f"the container driver runs containers with it{on}")


def _facts(cmd: str, machine: Machine) -> dict[str, str]:
    """Version, default runtime, cgroup manager and version, as the engine reports them."""
    if cmd == "podman":
        host = json.loads(_run(machine, ["podman", "info", "--format", "json"]).stdout)["host"]
        ver = _run(machine, ["podman", "version", "--format", "{{.Client.Version}}"]).stdout.strip()
        return {"version": ver, "runtime": host.get("ociRuntime", {}).get("name", ""),
                "cgroup_manager": host.get("cgroupManager", ""), "cgroup_version": host.get("cgroupVersion", "")}
    info = json.loads(_run(machine, ["docker", "info", "--format", "{{json .}}"]).stdout)
    return {"version": info.get("ServerVersion", ""), "runtime": info.get("DefaultRuntime", ""),
            "cgroup_manager": info.get("CgroupDriver", ""), "cgroup_version": str(info.get("CgroupVersion", "")),
            "init": "1" if info.get("InitBinary") else ""}


_NOFILE_INF, _NPROC_INF = 1 << 20, 1 << 22  # what "unlimited" becomes in a --ulimit value
# Soft and hard limits of open files and processes (bash: ulimit -u, dash: -p) of a shell there.
_LIMITS = "ulimit -Sn; ulimit -Hn; { ulimit -Su || ulimit -Sp; } 2>/dev/null; { ulimit -Hu || ulimit -Hp; } 2>/dev/null"


def _limits(machine: Machine) -> tuple[tuple[int, int], tuple[int, int]]:
    """(nofile, nproc) as (soft, hard) of a process on the machine where the engine runs."""
    res = machine.run(["sh", "-c", _LIMITS], timeout=60)
    words = res.stdout.split()
    if not res.ok or len(words) != 4 or not all(w.isdigit() or w == "unlimited" for w in words):
        return (1024, 1024), (1024, 1024)  # unknown: the candidates end with these anyway
    n = [inf if w == "unlimited" else int(w) for w, inf in zip(words, (_NOFILE_INF,) * 2 + (_NPROC_INF,) * 2)]
    return (n[0], n[1]), (n[2], n[3])


def _ulimit_candidates(machine: Machine) -> list[tuple[str, ...]]:
    """The machine's own limits first (a container should get what a host process gets), then capped ones."""
    nofile, nproc = _limits(machine)
    capped = tuple(min(v, NPROC_CAP) for v in nproc)
    out = []
    for nf, npr in ((nofile, nproc), (nofile, capped), ((1024, 1024), (1024, 1024))):
        cand = (f"nofile={nf[0]}:{nf[1]}", f"nproc={npr[0]}:{npr[1]}")
        if cand not in out:
            out.append(cand)
    return out


_CATATONIT = ("/usr/libexec/podman/catatonit", "/usr/lib/podman/catatonit")


def _has_catatonit(machine: Machine) -> bool:
    script = " || ".join(f"test -e {shlex.quote(p)}" for p in _CATATONIT) + " || command -v catatonit"
    return machine.run(["sh", "-c", script], timeout=60).ok


def probe(cmd: str, tag: str, runtime: str = "auto", cgroup_manager: str = "auto",
          machine: Machine | None = None) -> Engine:
    """First working (runtime, cgroup manager, ulimits) for `cmd` on `machine`, cached for the process."""
    machine = machine or local()
    key = (machine.name, cmd, tag, runtime, cgroup_manager)
    with _lock:
        if key in _engines:
            return _engines[key]
        facts = _facts(cmd, machine)
        if cmd == "podman":
            runtimes = [runtime] if runtime != "auto" else list(dict.fromkeys(
                r for r in (facts["runtime"], "runc", "crun")
                if r and (r == facts["runtime"] or machine.which(r))))
            managers = [cgroup_manager] if cgroup_manager != "auto" else list(dict.fromkeys(
                m for m in (facts["cgroup_manager"], "cgroupfs") if m))
            init = _has_catatonit(machine)
        else:
            if cgroup_manager != "auto":
                raise UserError("docker sets its cgroup driver in the daemon, not per container",
                                hint="remove cgroup_manager from this environment")
            runtimes = [runtime if runtime != "auto" else facts["runtime"]]
            managers = [facts["cgroup_manager"]]
            init = bool(facts.get("init"))
        tried = []
        for rt in runtimes:
            for mgr in managers:
                for ul in _ulimit_candidates(machine):
                    eng = Engine(cmd, facts["version"], rt, mgr, facts["cgroup_version"], ul, init,
                                 forced_runtime=runtime != "auto")
                    res = _run(machine, [*eng.cli(), "run", "--rm", "--pull=never", *eng.run_flags(), tag, "true"])
                    if res.ok:
                        _engines[key] = eng
                        return eng
                    tried.append(f"runtime={rt} cgroup_manager={mgr} {' '.join(ul)}: {_tail(res, 2)}")
                    if "rlimit" not in res.stderr.lower():
                        break  # not a ulimit problem: lower limits will not help
        hint = "set runtime/cgroup_manager for this environment, or apt-get install runc"
        if any("no cgroup mount found" in t for t in tried):
            # Seen where podman runs under `ip netns exec`, which mounts a fresh /sys without cgroups.
            hint = (f"the OCI runtime finds no cgroup filesystem{machine.on}: /sys/fs/cgroup is not mounted in "
                    "the mount namespace podman runs in (e.g. a shell started by `ip netns exec`, which "
                    "remounts /sys); mount the cgroup hierarchies there, or enter the network namespace "
                    "with `nsenter --net=/run/netns/NAME`, which keeps /sys")
        raise UserError(f"{cmd} cannot start a container{machine.on}; tried:\n  " + "\n  ".join(tried), hint)


def ensure_image(cmd: str, info: image.ImageInfo, machine: Machine | None = None) -> None:
    """Import the guest image tarball under its tag unless the engine already has it (once per
    process and machine). A remote machine gets the tarball through its blob cache first."""
    machine = machine or local()
    with _lock:
        if (machine.name, cmd, info.tag) in _imported:
            return
        # Elsewhere always through the blob cache (one `test -f` once it is there): that verified copy
        # is what an import there reads, now or after the engine's images were pruned.
        source = ship.ensure_blob(machine, info.tarball, ship.file_sha256(info.tarball), info.tarball.name)
        if not _run(machine, [cmd, "image", "inspect", info.tag], timeout=60).ok:
            res = _run(machine, [cmd, "import", "--change", 'CMD ["/bin/sh"]', source, info.tag], timeout=1800)
            if not res.ok:
                raise UserError(f"{cmd} import of the guest image{machine.on} failed: {_tail(res)}")
        if machine.is_local:  # a remote engine may hold images of other virtbench installations
            _remove_old_images(cmd, keep={i.hash for i in image.installed()} | {info.hash})
        _imported.add((machine.name, cmd, info.tag))


def mark_imported(cmd: str, tag: str, machine: Machine | None = None) -> None:
    """An image the engine on `machine` (default: this one) already holds under `tag` (a commit
    made there): neither import it nor prune it."""
    with _lock:
        _imported.add(((machine or local()).name, cmd, tag))


def _remove_old_images(cmd: str, keep: set[str]) -> None:
    """Drop engine copies of guest images whose tarball was pruned; in-use ones stay (no force)."""
    res = _run(local(), [cmd, "images", "--format", "{{.Repository}}:{{.Tag}}"], timeout=60)
    for ref in res.stdout.split():
        repo, _, tag = ref.rpartition(":")
        if repo == image.TAG_PREFIX and tag not in keep:
            _run(local(), [cmd, "rmi", ref], timeout=120)


def _parse_started(text: str) -> int:
    """RFC 3339 with nanoseconds (2026-11-22T04:22:45.472325762Z) -> epoch nanoseconds."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text.strip())
    if not m:
        raise ValueError(f"unreadable container start time {text!r}")
    base = datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    frac = (m.group(2) or "0")[:9].ljust(9, "0")
    return int(base.timestamp()) * 1_000_000_000 + int(frac)


def _process_start(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot), to tell a live pid from a reused one."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def _safe(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-.") or "x"


class ContainerInstance(Instance):
    def __init__(self, name: str, env: EnvSpec, role: str, index: int, engine: Engine, info: image.ImageInfo,
                 machine: Machine | None = None):
        super().__init__(name, env, role, index)
        self.machine = machine or local()
        self.engine = engine
        self.image = info
        self.container_id: str | None = None
        self.started_at: str | None = None
        # Host directory seen at /vb-mnt inside, mounts made later included (storage conditions).
        self.host_mount_dir: str | None = None

    def _cli(self, *args: str, timeout: float | None = CLI_TIMEOUT, stdin: bytes | None = None) -> ExecResult:
        return _run(self.machine, [*self.engine.cli(), *args], timeout=timeout, stdin=stdin)

    def start(self, run_id: str) -> None:
        shape = self.env.shape
        argv = ["create", "--name", self.name, "--hostname", self.name[:63], "--pull=never",
                "--label", "virtbench=1", "--label", f"virtbench.run={run_id}",
                "--label", f"virtbench.pid={os.getpid()}",
                "--label", f"virtbench.pidstart={_process_start(os.getpid()) or ''}",
                "--label", f"virtbench.host={socket.gethostname()}",  # where that pid lives
                "--label", f"virtbench.env={self.env.name}", *self.engine.run_flags()]
        if shape.vcpus:
            argv += ["--cpus", str(shape.vcpus)]
        if self.env.options.get("cpuset"):
            argv += ["--cpuset-cpus", self.env.options["cpuset"]]
        if shape.memory_mb:
            argv += ["--memory", f"{shape.memory_mb}m", "--memory-swap", f"{shape.memory_mb}m"]
        self.host_mount_dir = self.machine.container_mount_dir(self.name)
        if self.host_mount_dir:
            argv += ["--mount", f"type=bind,src={self.host_mount_dir},dst={hostdirs.GUEST_DIR},"
                                "bind-propagation=rslave"]
        argv += ["--network", "bridge", self.image.tag, "sleep", "infinity"]
        self.mark("requested")
        res = self._cli(*argv)
        if not res.ok:
            raise UserError(f"{self.engine.cmd} create {self.name} failed: {_tail(res)}")
        self.container_id = res.stdout.strip().splitlines()[-1]
        self.mark("created")
        res = self._cli("start", self.name)
        if not res.ok:
            raise UserError(f"{self.engine.cmd} start {self.name} failed: {_tail(res)}{self._logs()}")
        self.mark("running")
        self._wait_ready()  # before inspect, so "ready" is not delayed by it
        state = self._inspect()
        self.started_at = state["State"]["StartedAt"]
        self.mark("init", _parse_started(self.started_at) / 1e9)
        nets = state.get("NetworkSettings") or {}
        self.address = nets.get("IPAddress") or next(
            (n.get("IPAddress") for n in (nets.get("Networks") or {}).values() if n.get("IPAddress")), None)

    def _wait_ready(self) -> None:
        # The readiness probe doubles as scratch set-up: its first success is the "ready" mark.
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            res = self._cli("exec", self.name, "mkdir", "-p", SCRATCH, timeout=READY_TIMEOUT)
            if res.ok:
                self.mark("ready")
                return
            if time.monotonic() > deadline or not self.alive():
                raise UserError(f"container {self.name} never became ready: {_tail(res)}{self._logs()}")
            time.sleep(READY_POLL)

    def _inspect(self) -> dict:
        res = self._cli("inspect", self.name)
        if not res.ok:
            raise UserError(f"{self.engine.cmd} inspect {self.name} failed: {_tail(res)}")
        return json.loads(res.stdout)[0]

    def _logs(self) -> str:
        res = self._cli("logs", "--tail", "20", self.name, timeout=30)
        text = (res.stdout + res.stderr).strip()
        return f"\n  container log tail:\n  {text}" if text else ""

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        if gone := self._gone(argv):
            return gone
        cmd = ["exec", *(["-i"] if stdin is not None else [])]
        for k, v in (env or {}).items():
            cmd += ["--env", f"{k}={v}"]
        cmd.append(self.name)
        if timeout is not None:
            # coreutils timeout inside the container, so the timed-out process dies in there too;
            # the outer timeout only guards against a hung engine.
            cmd += ["timeout", "-k", "5", f"{timeout:.3f}".rstrip("0").rstrip(".")]  # never 1e+06
        res = self._cli(*cmd, *argv, timeout=None if timeout is None else timeout + 15, stdin=stdin)
        timed_out = res.timed_out or (timeout is not None and res.seconds >= timeout
                                      and res.returncode in (124, 137))
        stderr = res.stderr
        if res.returncode != 0 and not timed_out and not self.alive():
            stderr = stderr.rstrip() + f"\ninstance {self.name} is not running (container stopped or killed)"
        return ExecResult(argv, res.returncode, res.stdout, stderr, res.started, res.ended, timed_out)

    def copy_in(self, src: Path, dest: str) -> None:
        with self.machine.staged(src) as there:  # the engine copies from a file on its machine
            res = self._cli("cp", there, f"{self.name}:{dest}", timeout=600)
        if not res.ok:
            raise OSError(f"copy of {src} into {self.name}:{dest} failed: {_tail(res)}")

    def copy_out(self, src: str, dest: Path) -> None:
        with self.machine.fetched(dest) as there:  # the engine copies to a file on its machine
            res = self._cli("cp", f"{self.name}:{src}", there, timeout=600)
            if not res.ok:
                raise OSError(f"copy of {self.name}:{src} to {dest} failed: {_tail(res)}")

    def bin(self, name: str) -> str:
        return f"{image.GUEST_BIN_DIR}/{name}"

    def scratch_dir(self) -> str:
        return SCRATCH

    def alive(self) -> bool:
        if self._torn_down:
            return False
        res = self._cli("inspect", "-f", "{{.State.Running}}", self.name, timeout=30)
        return res.ok and res.stdout.strip() == "true"

    def metadata(self) -> dict[str, Any]:
        shape = self.env.shape
        return {**super().metadata(), **self.engine.describe(), "image_hash": self.image.hash,
                "image_shipped": ship.is_shipped_to(self.machine),  # through the machine's blob cache
                "container_id": self.container_id, "started_at": self.started_at,
                "cpus": shape.vcpus, "memory_mb": shape.memory_mb,
                **({"cpuset": self.env.options["cpuset"]} if self.env.options.get("cpuset") else {})}

    def _destroy(self) -> None:
        _remove(self.machine, self.engine.cli(), self.engine.cmd, self.name)
        self.machine.release_mount_dir(self.host_mount_dir)
        with _lock:
            _names.discard(self.name)


def _remove(machine: Machine, cli: list[str], cmd: str, name: str) -> None:
    res = _run(machine, [*cli, "rm", "-f", *(["-t", "0"] if cmd == "podman" else []), name], timeout=CLI_TIMEOUT)
    if not res.ok and "no such container" not in (res.stderr + res.stdout).lower():
        raise UserError(f"{cmd} rm {name} failed: {_tail(res)}")


@functools.lru_cache(maxsize=4)
def engine_storage(engine: str) -> tuple[str | None, int | None]:
    """(where the container engine here keeps containers' files, bytes free there); (None, None) if
    unknown. Kept for the process: `podman info` takes about a second."""
    try:
        cmd = pick_engine(engine)
        fmt = "{{.DockerRootDir}}" if cmd == "docker" else "{{.Store.GraphRoot}}"
        res = procs.run([cmd, "info", "--format", fmt], timeout=60)
        root = res.stdout.strip()
        return (root, shutil.disk_usage(root).free) if res.ok and os.path.isdir(root) else (None, None)
    except Exception:  # no engine: the driver's own check says so with its fix
        return None, None


class ContainerDriver(Driver):
    name = "container"
    traits = Traits(shares_kernel=True, machine_cores=True, engine_container=True, bridge_port=True,
                    monitor_scope="cgroup")
    description = "a container from the guest image (podman, or docker)"
    needs_image = True
    options = {
        "engine": OptionSpec(str, "auto", "container engine; auto = podman if it works, else docker",
                             ("auto", "podman", "docker")),
        "runtime": OptionSpec(str, "auto", "OCI runtime (runc, crun, ...); auto = probe what works"),
        "cgroup_manager": OptionSpec(str, "auto", "podman cgroup manager; auto = probe what works",
                                     ("auto", "cgroupfs", "systemd")),
        "machine": OptionSpec(str, "", "inventory host the containers run on (default: this machine)"),
        "cpuset": cpuset.OPTION,
    }

    def __init__(self, context):
        super().__init__(context)
        self._swept: set[str] = {local().name}  # the runner's cleanup_stale() sweeps this machine

    def _machine(self, env_options: Mapping[str, Any] | None) -> Machine:
        return self.context.machines.get((env_options or {}).get("machine") or None)

    def _image(self) -> image.ImageInfo:
        return self.context.image or image.require()

    def engine_for(self, env_options: Mapping[str, Any] | None = None) -> Engine:
        opts = {k: (env_options or {}).get(k, spec.default) for k, spec in self.options.items()}
        machine = self._machine(env_options)
        cmd = pick_engine(opts["engine"], machine)
        info = self._image()
        ensure_image(cmd, info, machine)
        return probe(cmd, info.tag, opts["runtime"], opts["cgroup_manager"], machine)

    @classmethod
    def scratch_space(cls, env: EnvSpec) -> ScratchSpace | None:
        """Every container's scratch is in the engine's storage on this machine's disk."""
        where, free = engine_storage(env.options.get("engine", "auto"))
        if where is None or free is None:
            return None
        return ScratchSpace(f"in the {{free}} free in the container engine's storage ({where})", free, shared=True)

    def lifecycle_ops(self, env):
        from .container_checks import ContainerLifecycle

        return ContainerLifecycle(self, env)

    def prepare_boot_cell(self, env, params, log):
        if params["image_mode"] != "overlay":
            return (f"image mode {params['image_mode']} does not apply to containers: every container starts "
                    "from a copy-on-write layer of the engine's image store (that is the overlay mode)"), {}
        if params["image_size"] not in ("auto", "", None):
            try:
                padded_image(self, self.context.image, params["image_size"], log)
            except ConditionUnavailable as exc:
                return str(exc), {}
        return None, {}

    def boot_cell_driver(self, params):
        """A driver over the guest image padded to the cell's image_size (built by prepare_boot_cell)."""
        if params["image_size"] in ("auto", "", None):
            return self
        info = padded_image(self, self.context.image, params["image_size"], lambda m: None)
        return ContainerDriver(DriverContext(self.context.run_id, self.context.workdir, info))

    def check_env(self, env: EnvSpec) -> list[Problem]:
        machine = self._machine(env.options)
        return cpuset.problems(env.options.get("cpuset") or "", self.name, machine.allowed_cpus(), machine.place)

    def check(self) -> list[Problem]:
        try:
            cmd = pick_engine("auto")
        except MissingTool as exc:
            return [Problem(exc.message, "apt-get install podman runc")]
        except UserError as exc:
            return [Problem(exc.message, exc.hint or "check 'podman info'")]
        try:
            info = self._image()
        except UserError as exc:
            return [Problem(exc.message, exc.hint or "run: virtbench image build")]
        try:
            ensure_image(cmd, info)
            probe(cmd, info.tag)
        except UserError as exc:
            return [Problem(exc.message, exc.hint or "")]
        return []

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        machine = self._machine(env.options)
        engine = self.engine_for(env.options)
        info = self._image()
        if machine.name not in self._swept:
            # The runner's cleanup_stale() knows no environments, so only this machine's: sweep
            # another machine once, when it is first used.
            self._swept.add(machine.name)
            self.stale_removed += self._cleanup(machine, engine.cmd, engine.cli())
        made: list[ContainerInstance] = []
        try:
            for i in range(count):
                inst = ContainerInstance(self._name(env, role, i), env, role, i, engine, info, machine)
                made.append(inst)
                inst.start(self.context.run_id)
        except BaseException as exc:
            # All or none: what started goes away again, and a second Ctrl-C must not cut that short.
            with procs.interrupts_held():
                for inst in made:
                    with contextlib.suppress(Exception):
                        inst.teardown()
            if isinstance(exc, Exception):
                raise UserError(f"could not start {count} container(s) for {env.name}/{role} "
                                f"(failed at #{len(made) - 1}): {exc}") from exc
            raise
        return list(made)

    def _name(self, env: EnvSpec, role: str, index: int) -> str:
        # Run ids start with the date (20261122-042745-ab12): their tail is the distinctive part.
        short = re.sub(r"[^a-zA-Z0-9]", "", self.context.run_id)[-8:] or "run"
        base = f"vb-{short}-{_safe(env.name)}-{_safe(role)}-{index}"
        with _lock:
            name, n = base, 1
            while name in _names:  # the runner may replace a dead instance under the same index
                n += 1
                name = f"{base}-r{n}"
            _names.add(name)
        return name

    def cleanup_stale(self) -> list[str]:
        """Remove virtbench containers on this machine whose creating process is gone (or its pid
        was reused). Remote machines are swept at their first provision (see provision)."""
        machine = local()
        try:
            cmd = pick_engine("auto", machine)
        except UserError:
            return []  # no engine, so nothing of ours can be running; check() reports why
        cli = next((e.cli() for k, e in _engines.items() if k[0] == machine.name and e.cmd == cmd), [cmd])
        return self._cleanup(machine, cmd, cli)

    def _cleanup(self, machine: Machine, cmd: str, cli: list[str]) -> list[str]:
        res = _run(machine, [*cli, "ps", "-a", "--filter", "label=virtbench=1", "--format", "{{.Names}}"],
                   timeout=60)
        removed = []
        for name in res.stdout.split():
            got = _run(machine, [*cli, "inspect", "-f", "{{json .Config.Labels}}", name], timeout=60)
            if not got.ok:
                continue  # gone meanwhile
            labels = json.loads(got.stdout or "{}") or {}
            if labels.get("virtbench.host", socket.gethostname()) != socket.gethostname():
                continue  # the pid label is only meaningful on the machine that runs virtbench
            pid, start = labels.get("virtbench.pid", ""), labels.get("virtbench.pidstart", "")
            now = _process_start(int(pid)) if pid.isdigit() else None
            if now is None or (start and now != start):
                with contextlib.suppress(UserError):
                    _remove(machine, cli, cmd, name)
                    removed.append(name)
        return removed


def padded_image(driver: "ContainerDriver", info: image.ImageInfo, size: str, log: Callable[[str], None]) -> image.ImageInfo:
    """The guest image plus a layer of `size` random bytes, committed under its own tag (cached)."""
    from ..vm import disk

    nbytes = disk.parse_size(size)
    tarball_bytes = info.tarball.stat().st_size
    pad = nbytes - tarball_bytes
    if pad <= 0:
        raise ConditionUnavailable(f"image size {size} is smaller than the container image "
                                   f"({disk.format_size(tarball_bytes)})")
    padded = image.ImageInfo(f"{info.hash}-pad{nbytes}", info.tarball, info.manifest)
    engine = driver.engine_for({})
    cli = engine.cli()
    # Known to the engine already: tell the container driver so it neither imports nor prunes it.
    known = (engine.cmd, padded.tag)
    if procs.run([*cli, "image", "inspect", padded.tag], timeout=60).ok:
        mark_imported(*known)
        return padded
    log(f"building a {size} container image (padding with {disk.format_size(pad)} of random data)")
    name = f"vb-pad-{os.getpid()}-{nbytes}"
    # head -c from /dev/urandom inside the container: incompressible bytes in a new layer.
    script = (f"mkdir -p {shlex.quote(os.path.dirname(disk.PAD_PATH))} && "
              f"head -c {pad} /dev/urandom > {shlex.quote(disk.PAD_PATH)}")
    res = procs.run([*cli, "run", "--name", name, *engine.run_flags(), "--pull=never", info.tag, "sh", "-c",
                     script], timeout=3600)
    try:
        if not res.ok:
            raise UserError(f"padding the container image failed: {res.describe_failure()}")
        res = procs.run([*cli, "commit", "-q", name, padded.tag], timeout=3600)
        if not res.ok:
            raise UserError(f"podman commit of the padded image failed: {res.describe_failure()}")
    finally:
        procs.run([*cli, "rm", "-f", name], timeout=120)
    mark_imported(*known)
    return padded
