"""Containers from the guest image, on this machine or an inventory host (option `machine`):
the container driver and its instances. Which engine answers there, the settings a container can
start with and the image in its store are the engine module's (virtbench/drivers/container/engine.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import cpuset
from . import engine, ociruntime
from ... import hostdirs, image, procs
from . import engine as engine_mod
from .engine import CLI_TIMEOUT, Engine, ensure_image, pick_engine, probe, remove, tail
from ...errors import ConditionUnavailable, MissingTool, UserError
from ...machines import Machine, ledger, local, ship
from ...model import EnvSpec, ExecResult
from ..base import GuestImageInstance
from ..base import Driver, DriverContext, HostSideScope, Instance, OptionSpec, Problem, ScratchSpace, Traits

__all__ = ["ContainerDriver", "ContainerInstance", "SCRATCH"]

SCRATCH = "/tmp/vb-scratch"
# gVisor mounts its own in-memory tmpfs over an image's empty /tmp, so scratch there would put disk and
# file tests in the sandbox's memory; under runsc the scratch is on the root file system (served by its
# gofer), as /tmp is under runc and crun (the container's overlay).
GVISOR_SCRATCH = "/var/tmp/vb-scratch"
READY_TIMEOUT = 60.0
READY_POLL = 0.02
_lock = threading.Lock()
_names: set[str] = set()


def _parse_started(text: str) -> int:
    """RFC 3339 with nanoseconds (2026-11-22T04:22:45.472325762Z) -> epoch nanoseconds."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text.strip())
    if not m:
        raise ValueError(f"unreadable container start time {text!r}")
    base = datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    frac = (m.group(2) or "0")[:9].ljust(9, "0")
    return int(base.timestamp()) * 1_000_000_000 + int(frac)


def _safe(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-.") or "x"


class ContainerInstance(GuestImageInstance):
    def __init__(self, name: str, env: EnvSpec, role: str, index: int, engine: Engine, info: image.ImageInfo,
                 machine: Machine | None = None):
        super().__init__(name, env, role, index)
        self.machine = machine or local()
        self.inside = engine_mod.ContainerMachine(name, self.machine, engine)  # the machine inside it
        self.engine = engine
        self.image = info
        self.container_id: str | None = None
        self.started_at: str | None = None
        # Host directory seen at /vb-mnt inside, mounts made later included (storage conditions).
        self.host_mount_dir: str | None = None
        self.footprint: dict[str, int] = {}  # kB of PSS on its machine, by holder (ociruntime.footprint)
        self.pid = 0  # its first process on its machine (gVisor: the sandbox, runsc-sandbox)

    def engine_cli(self, *args: str, timeout: float | None = CLI_TIMEOUT, stdin: bytes | None = None) -> ExecResult:
        """The engine's command line with `args`, on the container's machine (restart, commit, rmi ...)."""
        return self.machine.run([*self.engine.cli(), *args], timeout=timeout, stdin=stdin,
                                cwd=engine.cwd_for(self.machine))

    def start(self, run_id: str) -> None:
        shape = self.env.shape
        # The owner record as labels (machines/ledger.py): a later run finds it if this one is killed.
        owner = [a for k, v in ledger.labels(run_id).items() for a in ("--label", f"{k}={v}")]
        argv = ["create", "--name", self.name, "--hostname", self.name[:63], "--pull=never",
                "--label", "virtbench=1", *owner, "--label", f"virtbench.env={self.env.name}",
                *self.engine.run_flags()]
        cpus = self.env.options.get("cpus") or shape.vcpus  # a fractional quota (cpus = 0.9) before the shape's
        if isinstance(cpus, bool) or not isinstance(cpus, (int, float, type(None))) or (cpus or 0) < 0:
            raise UserError(f"environment {self.env.name}: cpus must be a positive number of cores such as 0.9, "
                            f"got {cpus!r}")
        if cpus:
            argv += ["--cpus", f"{cpus:g}"]
        if self.env.options.get("cpuset"):
            argv += ["--cpuset-cpus", self.env.options["cpuset"]]
        if shape.memory_mb:
            argv += ["--memory", f"{shape.memory_mb}m", "--memory-swap", f"{shape.memory_mb}m"]
        # Only a machine with this process's own directory shares mount points into its containers.
        own = self.machine.process_dir
        self.host_mount_dir = own.container_mount_dir(self.name) if own is not None else None
        if self.host_mount_dir:
            argv += ["--mount", f"type=bind,src={self.host_mount_dir},dst={hostdirs.GUEST_DIR},"
                                "bind-propagation=rslave"]
        argv += ["--network", self.engine.network(), self.image.tag, "sleep", "infinity"]
        self.mark("requested")
        res = self.engine_cli(*argv)
        if not res.ok:
            raise UserError(f"{self.engine.cmd} create {self.name} failed: {tail(res)}")
        self.container_id = res.stdout.strip().splitlines()[-1]
        self.mark("created")
        res = self.engine_cli("start", self.name)
        if not res.ok:
            raise UserError(f"{self.engine.cmd} start {self.name} failed: {tail(res)}{self._logs()}")
        self.mark("running")
        self._wait_ready()  # before inspect, so "ready" is not delayed by it
        state = self._inspect()
        self.started_at = state["State"]["StartedAt"]
        self.mark("init", _parse_started(self.started_at) / 1e9)
        # Memory per sandbox, right after start (idle): the runtime's processes beside the workload's.
        self.footprint = ociruntime.footprint(self.machine, int(state["State"].get("ConmonPid") or 0))
        self.pid = int(state["State"].get("Pid") or 0)
        nets = state.get("NetworkSettings") or {}
        self.address = nets.get("IPAddress") or next(
            (n.get("IPAddress") for n in (nets.get("Networks") or {}).values() if n.get("IPAddress")), None)

    def _wait_ready(self) -> None:
        # The readiness probe doubles as scratch set-up: its first success is the "ready" mark.
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            res = self.engine_cli("exec", self.name, "mkdir", "-p", self.scratch_dir(), timeout=READY_TIMEOUT)
            if res.ok:
                self.mark("ready")
                return
            if time.monotonic() > deadline or not self.alive():
                raise UserError(f"container {self.name} never became ready: {tail(res)}{self._logs()}")
            time.sleep(READY_POLL)

    def _inspect(self) -> dict:
        res = self.engine_cli("inspect", self.name)
        if not res.ok:
            raise UserError(f"{self.engine.cmd} inspect {self.name} failed: {tail(res)}")
        return json.loads(res.stdout)[0]

    def _logs(self) -> str:
        res = self.engine_cli("logs", "--tail", "20", self.name, timeout=30)
        text = (res.stdout + res.stderr).strip()
        return f"\n  container log tail:\n  {text}" if text else ""

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        if gone := self._gone(argv):
            return gone
        res = self.inside.run(argv, timeout=timeout, stdin=stdin, env=env)
        if res.returncode != 0 and not res.timed_out and not self.alive():
            res.stderr = res.stderr.rstrip() + f"\ninstance {self.name} is not running (container stopped or killed)"
        return res

    def scratch_dir(self) -> str:
        return GVISOR_SCRATCH if self.engine.runtime == "runsc" else SCRATCH

    def host_side_scope(self) -> HostSideScope | None:
        """HostSideMonitoring: a gVisor sandbox's CPU and memory come from its cgroup on the machine
        (the sandbox and its gofer run in the container's cgroup there)."""
        if ociruntime.kind(self.engine.runtime) != "runsc" or self.pid <= 0:
            return None
        return HostSideScope(self.pid, ociruntime.NO_COUNTERS_INSIDE)

    def alive(self) -> bool:
        if self._torn_down:
            return False
        res = self.engine_cli("inspect", "-f", "{{.State.Running}}", self.name, timeout=30)
        return res.ok and res.stdout.strip() == "true"

    def metadata(self) -> dict[str, Any]:
        shape = self.env.shape
        return {**super().metadata(), **self.engine.describe(), "image_hash": self.image.hash,
                "image_shipped": ship.is_shipped_to(self.machine),  # through the machine's blob cache
                "container_id": self.container_id, "started_at": self.started_at,
                **({"host_pss_kb": self.footprint} if self.footprint else {}),
                "cpus": self.env.options.get("cpus") or shape.vcpus, "memory_mb": shape.memory_mb,
                **({"cpuset": self.env.options["cpuset"]} if self.env.options.get("cpuset") else {})}

    def _destroy(self) -> None:
        remove(self.machine, self.engine.cli(), self.engine.cmd, self.name)
        if self.host_mount_dir and self.machine.process_dir is not None:
            self.machine.process_dir.release_mount_dir(self.host_mount_dir)
        with _lock:
            _names.discard(self.name)


def leftover_containers(machine: Machine) -> list[str]:
    """Remove virtbench's containers on the machine whose owner is gone (a killed run); found by
    their owner labels, those of another controller or a live run left alone."""
    try:
        cmd = pick_engine("auto", machine)
    except UserError:
        return []  # no engine there, so nothing of ours can be running; check() reports why
    cli = engine.cli_for(machine, cmd)
    res = machine.run([*cli, "ps", "-a", "--filter", "label=virtbench=1", "--format", "{{.Names}} {{json .Labels}}"],
                      timeout=60)
    removed = []
    for line in res.stdout.splitlines() if res.ok else []:
        name, _, text = line.partition(" ")
        try:
            labels = _labels(json.loads(text or "{}"))
        except ValueError:
            continue
        if ledger.gone(labels):
            with contextlib.suppress(UserError):
                remove(machine, cli, cmd, name)
                removed.append(f"container {name} (run {labels.get('virtbench.run', '?')})")
    return removed



def _labels(got: Any) -> dict[str, str]:
    """Labels as `ps --format '{{json .Labels}}'` gives them: a map (podman), "k=v,k=v" (docker)."""
    if isinstance(got, str):
        return dict(item.partition("=")[::2] for item in got.split(",") if item)
    return got or {}


class ContainerDriver(Driver):
    name = "container"
    traits = Traits(repetition_overhead_s=1.0, shares_kernel=True, machine_cores=True, engine_container=True, bridge_port=True,
                    monitor_scope="cgroup")
    description = "a container from the guest image (podman, or docker)"
    needs_image = True
    options = {
        "engine": OptionSpec(str, "auto", "container engine; auto = podman if it works, else docker",
                             ("auto", "podman", "docker")),
        "runtime": OptionSpec(str, "auto", "OCI runtime: runc, crun, runsc (gVisor) or the absolute path of one; "
                              "auto = the engine's default, else the first of runc, crun that starts a container"),
        "platform": OptionSpec(str, "", "gVisor only: how runsc intercepts system calls (ptrace, systrap, kvm); "
                               "default ptrace", ("", *ociruntime.GVISOR_PLATFORMS)),
        "network": OptionSpec(str, "", "gVisor only: sandbox (gVisor's network stack), host (socket calls go to the "
                              "kernel of the container's network namespace), none; default auto = sandbox where "
                              "it starts, else host", ("", *ociruntime.GVISOR_NETWORKS)),
        "cgroup_manager": OptionSpec(str, "auto", "podman cgroup manager; auto = probe what works",
                                     ("auto", "cgroupfs", "systemd")),
        "machine": OptionSpec(str, "", "inventory host the containers run on (default: this machine)"),
        "cpuset": cpuset.OPTION,
        "cpus": OptionSpec(float, 0.0, "CPU time the container may use, in cores, also a fraction such as 0.9 (the "
                                       "engine's --cpus, a CFS quota); default: the shape's vcpus"),
    }
    leftovers = (ledger.Finder("containers", leftover_containers),)

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
        return probe(cmd, info.tag, opts["runtime"], opts["cgroup_manager"], machine, opts["platform"], opts["network"])

    @classmethod
    def option_problems(cls, options: Mapping[str, Any]) -> list[tuple[str, str, tuple | None]]:
        return ociruntime.option_problems(dict(options))

    @classmethod
    def scratch_space(cls, env: EnvSpec) -> ScratchSpace | None:
        """Every container's scratch is in the engine's storage on this machine's disk."""
        where, free = engine.engine_storage(env.options.get("engine", "auto"))
        if where is None or free is None:
            return None
        return ScratchSpace(f"in the {{free}} free in the container engine's storage ({where})", free, shared=True)

    def lifecycle_ops(self, env):
        from .checks import ContainerLifecycle

        return ContainerLifecycle(self, env)

    def prepare_boot_cell(self, env, params, log):
        if params["image_mode"] != "overlay":
            return (f"image mode {params['image_mode']} does not apply to containers: every container starts "
                    "from a copy-on-write layer of the engine's image store (that is the overlay mode)"), {}
        if params["image_size"] not in ("auto", "", None):
            try:
                engine.padded_image(self.engine_for({}), self.context.image, params["image_size"], log)
            except ConditionUnavailable as exc:
                return str(exc), {}
        return None, {}

    def boot_cell_driver(self, params):
        """A driver over the guest image padded to the cell's image_size (built by prepare_boot_cell)."""
        if params["image_size"] in ("auto", "", None):
            return self
        info = engine.padded_image(self.engine_for({}), self.context.image, params["image_size"], lambda m: None)
        return ContainerDriver(DriverContext(self.context.run_id, self.context.workdir, info, self.context.machines))

    def check_env(self, env: EnvSpec) -> list[Problem]:
        machine = self._machine(env.options)
        return cpuset.problems(env.options.get("cpuset") or "", self.name, machine.allowed_cpus(), machine.place)

    def check(self, env: EnvSpec | None = None) -> list[Problem]:
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

