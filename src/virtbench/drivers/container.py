"""Containers from the guest image, through podman (or docker where a Docker engine answers).

What works differs between machines (crun vs runc, cgroup v1 vs v2, which ulimits the runtime may
set), so the first provision probes a tiny `run --rm ... true` with candidate settings, keeps the
first that works for the life of the process, and records it in every instance's metadata.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import image, procs
from ..conditions import hostmounts
from ..errors import MissingTool, UserError
from ..model import EnvSpec, ExecResult
from .base import Driver, Instance, OptionSpec, Problem

SCRATCH = "/tmp/vb-scratch"
READY_TIMEOUT = 60.0
READY_POLL = 0.02
CLI_TIMEOUT = 120.0
# Rootful podman hands conmon RLIMIT_NPROC 32768 on these machines, so a container cannot be given
# more even when our own hard limit is higher; the last resort is the 1024 that always worked.
NPROC_CAP = 32768

_lock = threading.RLock()
_engines: dict[tuple, Engine] = {}
_imported: set[tuple[str, str]] = set()
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


def _run(argv: Sequence[str], timeout: float | None = CLI_TIMEOUT, stdin: bytes | None = None) -> ExecResult:
    return procs.run(argv, timeout=timeout, stdin=stdin)


def _tail(res: ExecResult, lines: int = 3) -> str:
    text = (res.stderr.strip() or res.stdout.strip()).splitlines()[-lines:]
    return " | ".join(text) or res.describe_failure()


_picked: dict[tuple, str] = {}


def pick_engine(choice: str = "auto") -> str:
    """podman if installed and answering, else docker if its engine answers. A working answer is
    kept for the process: `podman info` costs about a second, and every provision asks."""
    key = (choice, shutil.which("podman"), shutil.which("docker"))  # a changed PATH asks again
    if key not in _picked:
        _picked[key] = _pick_engine(choice)
    return _picked[key]


def _pick_engine(choice: str) -> str:
    if choice not in ("auto", "podman", "docker"):
        raise UserError(f"unknown container engine '{choice}'", hint="use auto, podman or docker")
    podman_err = None
    if choice in ("auto", "podman") and shutil.which("podman"):
        res = _run(["podman", "info", "--format", "json"], timeout=60)
        if res.ok:
            return "podman"
        podman_err = _tail(res)
    if choice in ("auto", "docker") and shutil.which("docker"):
        if _run(["docker", "info"], timeout=60).ok:
            return "docker"
        if choice == "docker":
            raise UserError("the docker client is installed but no Docker engine answers ('docker info' failed)",
                            hint="start the Docker daemon, or use engine = \"podman\"")
    if podman_err:
        raise UserError(f"podman is installed but 'podman info' fails: {podman_err}")
    if choice == "docker":
        raise MissingTool("docker", "docker.io")
    raise MissingTool("podman", "podman runc", "the container driver runs containers with it")


def _facts(cmd: str) -> dict[str, str]:
    """Version, default runtime, cgroup manager and version, as the engine reports them."""
    if cmd == "podman":
        host = json.loads(_run(["podman", "info", "--format", "json"]).stdout)["host"]
        ver = _run(["podman", "version", "--format", "{{.Client.Version}}"]).stdout.strip()
        return {"version": ver, "runtime": host.get("ociRuntime", {}).get("name", ""),
                "cgroup_manager": host.get("cgroupManager", ""), "cgroup_version": host.get("cgroupVersion", "")}
    info = json.loads(_run(["docker", "info", "--format", "{{json .}}"]).stdout)
    return {"version": info.get("ServerVersion", ""), "runtime": info.get("DefaultRuntime", ""),
            "cgroup_manager": info.get("CgroupDriver", ""), "cgroup_version": str(info.get("CgroupVersion", "")),
            "init": "1" if info.get("InitBinary") else ""}


def _ulimit_candidates() -> list[tuple[str, ...]]:
    """Our own limits first (a container should get what a host process gets), then capped ones."""
    def own(res: int, inf: int) -> tuple[int, int]:
        soft, hard = resource.getrlimit(res)
        return (inf if soft == resource.RLIM_INFINITY else soft, inf if hard == resource.RLIM_INFINITY else hard)

    nofile, nproc = own(resource.RLIMIT_NOFILE, 1 << 20), own(resource.RLIMIT_NPROC, 1 << 22)
    capped = tuple(min(v, NPROC_CAP) for v in nproc)
    out = []
    for nf, npr in ((nofile, nproc), (nofile, capped), ((1024, 1024), (1024, 1024))):
        cand = (f"nofile={nf[0]}:{nf[1]}", f"nproc={npr[0]}:{npr[1]}")
        if cand not in out:
            out.append(cand)
    return out


def _has_catatonit() -> bool:
    return any(Path(p).exists() for p in ("/usr/libexec/podman/catatonit", "/usr/lib/podman/catatonit")) \
        or bool(shutil.which("catatonit"))


def probe(cmd: str, tag: str, runtime: str = "auto", cgroup_manager: str = "auto") -> Engine:
    """First working (runtime, cgroup manager, ulimits) for `cmd`, cached for the process."""
    key = (cmd, tag, runtime, cgroup_manager)
    with _lock:
        if key in _engines:
            return _engines[key]
        facts = _facts(cmd)
        if cmd == "podman":
            runtimes = [runtime] if runtime != "auto" else list(dict.fromkeys(
                r for r in (facts["runtime"], "runc", "crun") if r and (r == facts["runtime"] or shutil.which(r))))
            managers = [cgroup_manager] if cgroup_manager != "auto" else list(dict.fromkeys(
                m for m in (facts["cgroup_manager"], "cgroupfs") if m))
            init = _has_catatonit()
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
                for ul in _ulimit_candidates():
                    eng = Engine(cmd, facts["version"], rt, mgr, facts["cgroup_version"], ul, init,
                                 forced_runtime=runtime != "auto")
                    res = _run([*eng.cli(), "run", "--rm", "--pull=never", *eng.run_flags(), tag, "true"])
                    if res.ok:
                        _engines[key] = eng
                        return eng
                    tried.append(f"runtime={rt} cgroup_manager={mgr} {' '.join(ul)}: {_tail(res, 2)}")
                    if "rlimit" not in res.stderr.lower():
                        break  # not a ulimit problem: lower limits will not help
        raise UserError(f"{cmd} cannot start a container; tried:\n  " + "\n  ".join(tried),
                        hint="set runtime/cgroup_manager for this environment, or apt-get install runc")


def ensure_image(cmd: str, info: image.ImageInfo) -> None:
    """Import the guest image tarball under its tag unless the engine already has it (once per process)."""
    with _lock:
        if (cmd, info.tag) in _imported:
            return
        if not _run([cmd, "image", "inspect", info.tag], timeout=60).ok:
            res = _run([cmd, "import", "--change", 'CMD ["/bin/sh"]', str(info.tarball), info.tag], timeout=1800)
            if not res.ok:
                raise UserError(f"{cmd} import of the guest image failed: {_tail(res)}")
        _remove_old_images(cmd, keep={i.hash for i in image.installed()} | {info.hash})
        _imported.add((cmd, info.tag))


def _remove_old_images(cmd: str, keep: set[str]) -> None:
    """Drop engine copies of guest images whose tarball was pruned; in-use ones stay (no force)."""
    res = _run([cmd, "images", "--format", "{{.Repository}}:{{.Tag}}"], timeout=60)
    for ref in res.stdout.split():
        repo, _, tag = ref.rpartition(":")
        if repo == image.TAG_PREFIX and tag not in keep:
            _run([cmd, "rmi", ref], timeout=120)


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
    def __init__(self, name: str, env: EnvSpec, role: str, index: int, engine: Engine, info: image.ImageInfo):
        super().__init__(name, env, role, index)
        self.engine = engine
        self.image = info
        self.container_id: str | None = None
        self.started_at: str | None = None
        # Host directory seen at /vb-mnt inside, mounts made later included (storage conditions).
        self.host_mount_dir: str | None = None

    def _cli(self, *args: str, timeout: float | None = CLI_TIMEOUT, stdin: bytes | None = None) -> ExecResult:
        return _run([*self.engine.cli(), *args], timeout=timeout, stdin=stdin)

    def start(self, run_id: str) -> None:
        shape = self.env.shape
        argv = ["create", "--name", self.name, "--hostname", self.name[:63], "--pull=never",
                "--label", "virtbench=1", "--label", f"virtbench.run={run_id}",
                "--label", f"virtbench.pid={os.getpid()}",
                "--label", f"virtbench.pidstart={_process_start(os.getpid()) or ''}",
                "--label", f"virtbench.env={self.env.name}", *self.engine.run_flags()]
        if shape.vcpus:
            argv += ["--cpus", str(shape.vcpus)]
        if shape.memory_mb:
            argv += ["--memory", f"{shape.memory_mb}m", "--memory-swap", f"{shape.memory_mb}m"]
        self.host_mount_dir = hostmounts.prepare(self.name)
        if self.host_mount_dir:
            argv += ["--mount", f"type=bind,src={self.host_mount_dir},dst={hostmounts.GUEST_DIR},"
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
        if self._torn_down:
            now = time.time()
            return ExecResult(argv, 125, "", f"instance {self.name} was torn down", now, now)
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
        res = self._cli("cp", str(src), f"{self.name}:{dest}", timeout=600)
        if not res.ok:
            raise OSError(f"copy of {src} into {self.name}:{dest} failed: {_tail(res)}")

    def copy_out(self, src: str, dest: Path) -> None:
        res = self._cli("cp", f"{self.name}:{src}", str(dest), timeout=600)
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
                "container_id": self.container_id, "started_at": self.started_at,
                "cpus": shape.vcpus, "memory_mb": shape.memory_mb}

    def _destroy(self) -> None:
        _remove(self.engine.cli(), self.engine.cmd, self.name)
        hostmounts.release(self.host_mount_dir)
        with _lock:
            _names.discard(self.name)


def _remove(cli: list[str], cmd: str, name: str) -> None:
    res = _run([*cli, "rm", "-f", *(["-t", "0"] if cmd == "podman" else []), name], timeout=CLI_TIMEOUT)
    if not res.ok and "no such container" not in (res.stderr + res.stdout).lower():
        raise UserError(f"{cmd} rm {name} failed: {_tail(res)}")


class ContainerDriver(Driver):
    name = "container"
    description = "a container from the guest image (podman, or docker)"
    needs_image = True
    options = {
        "engine": OptionSpec(str, "auto", "container engine; auto = podman if it works, else docker",
                             ("auto", "podman", "docker")),
        "runtime": OptionSpec(str, "auto", "OCI runtime (runc, crun, ...); auto = probe what works"),
        "cgroup_manager": OptionSpec(str, "auto", "podman cgroup manager; auto = probe what works",
                                     ("auto", "cgroupfs", "systemd")),
    }

    def _image(self) -> image.ImageInfo:
        return self.context.image or image.require()

    def engine_for(self, env_options: Mapping[str, Any] | None = None) -> Engine:
        opts = {k: (env_options or {}).get(k, spec.default) for k, spec in self.options.items()}
        cmd = pick_engine(opts["engine"])
        info = self._image()
        ensure_image(cmd, info)
        return probe(cmd, info.tag, opts["runtime"], opts["cgroup_manager"])

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
        engine = self.engine_for(env.options)
        info = self._image()
        made: list[ContainerInstance] = []
        try:
            for i in range(count):
                inst = ContainerInstance(self._name(env, role, i), env, role, i, engine, info)
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
        """Remove virtbench containers whose creating process is gone (or its pid was reused)."""
        try:
            cmd = pick_engine("auto")
        except UserError:
            return []  # no engine, so nothing of ours can be running; check() reports why
        cli = next((e.cli() for e in _engines.values() if e.cmd == cmd), [cmd])
        res = _run([*cli, "ps", "-a", "--filter", "label=virtbench=1", "--format", "{{.Names}}"], timeout=60)
        removed = []
        for name in res.stdout.split():
            got = _run([*cli, "inspect", "-f", "{{json .Config.Labels}}", name], timeout=60)
            if not got.ok:
                continue  # gone meanwhile
            labels = json.loads(got.stdout or "{}") or {}
            pid, start = labels.get("virtbench.pid", ""), labels.get("virtbench.pidstart", "")
            now = _process_start(int(pid)) if pid.isdigit() else None
            if now is None or (start and now != start):
                with contextlib.suppress(UserError):
                    _remove(cli, cmd, name)
                    removed.append(name)
        return removed
