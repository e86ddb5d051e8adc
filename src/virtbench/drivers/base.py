"""The environment driver interface: turn an EnvSpec into running instances and back into nothing.

Drivers know nothing about workloads. Workloads only see `Instance`. Here, below the drivers, vm/
and cpuset, so that all of them import downward.

What an instance *is* is said by its `Traits`, and what it can do beyond running commands by the
ability protocols at the end (rebootable, disk hot-plug, snapshot, volume attach, guest relay):
code that must treat kinds of instance differently asks those, never a driver's name.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..image import GUEST_BIN_DIR
from ..machines import Machine, Pool, ledger, local
from ..model import EnvSpec, ExecResult

# Lifecycle phases in order; drivers record the ones they can observe (epoch seconds).
# ssh_ready: the first command answered over SSH (cloud instances; before ready, when the instance
# has also been prepared for workloads).
PHASES = ("requested", "created", "running", "init", "ssh_ready", "ready", "teardown_start", "teardown_end")


@dataclass
class DriverContext:
    """What the runner hands every driver: the run, a private work directory, the guest image."""

    run_id: str
    workdir: Path
    image: Any = None  # virtbench.image.ImageInfo when a driver needs the guest image
    # The machines of the run (this one, SSH hosts of the inventory): drivers act through them.
    machines: Pool = field(default_factory=Pool)


@dataclass(frozen=True)
class OptionSpec:
    """One driver option a suite file may set under an environment."""

    type: type
    default: Any
    help: str
    choices: tuple | None = None


@dataclass(frozen=True)
class Traits:
    """What an instance is, declared by its driver (an instance may say otherwise, e.g. pods on a
    real cluster). Each field answers one question code used to answer with a list of driver names."""

    # Its commands are plain processes of the machine, without a container or VM (host).
    host_process: bool = False
    # The instance is its machine: its files and processes are the machine's own (host, ssh, cloud).
    is_machine: bool = False
    # A machine virtbench does not own: never rewrite its files, e.g. /etc/hosts (host, ssh).
    real_machine: bool = False
    # Runs on its machine's kernel and draws on that machine's CPUs (host, container, kube-play pods).
    shares_kernel: bool = False
    # Its CPUs are cores of its machine, shared with whatever else runs there (host, container, vm).
    machine_cores: bool = False
    # A container of an engine on its machine: engine volumes, its network namespace's links, mounts
    # bind-propagated from the machine (container).
    engine_container: bool = False
    # Each instance is one port of a Linux bridge on its machine (container, kube-play pods).
    bridge_port: bool = False
    # A guest of a hypervisor virtbench starts on its machine, booting its own kernel (vm): what the
    # studies' boot times measured; QEMU's accelerator matters.
    hypervisor_guest: bool = False
    # vb-monitor's --scope inside it; None: its series would repeat its machine's own (host).
    monitor_scope: str | None = "host"
    # Seconds one repetition costs beyond the workload's own run (starting the command inside the
    # instance, collecting its output): what a run's plan adds per repetition (run/plan.py).
    repetition_overhead_s: float = 0.5


def _no_registry(env: EnvSpec) -> Traits:
    return Traits()


# The driver registry installs its lookup here when it is imported (drivers/__init__.py): this module
# is below the drivers and does not import them.
_traits_lookup: Callable[[EnvSpec], Traits] = _no_registry


def set_traits_lookup(lookup: Callable[[EnvSpec], Traits]) -> None:
    global _traits_lookup
    _traits_lookup = lookup


class Instance(ABC):
    """One running machine-like thing that can run argument lists."""

    # What some kinds of instance have, declared here so callers read them, never probe for them:
    node: str | None = None  # the cluster node it runs on (pods on a real cluster)
    hostname: str | None = None  # its own host name, when peers may reach it by that name (a VM)
    host_mount_dir: str | None = None  # a directory of its machine it sees (bind-mounted), if any
    engine: Any = None  # the container engine it runs under (container, kube-play pods), if any
    monitor_scope: str | None = None  # vb-monitor's scope inside it, when not its traits' (pods)
    driver: Any = None  # the driver that made it, where it offers something over several (ClusterNetworking)

    def __init__(self, name: str, env: EnvSpec, role: str = "main", index: int = 0):
        self.name = name
        self.env = env
        self.role = role
        self.index = index
        self.lifecycle: dict[str, float] = {}
        self.address: str | None = None  # reachable IP for peers, when the driver knows one
        self.machine: Machine = local()  # the machine the instance runs on (drivers set theirs)
        # The machine inside it: its files are copied in and out with inside.put/get. The machine it
        # runs on for a bare or SSH host; a container, a VM's guest and a pod set their own.
        self.inside: Machine | None = self.machine
        self._torn_down = False

    @property
    def traits(self) -> Traits:
        """What the instance is: its environment's driver's traits unless the instance knows better."""
        return _traits_lookup(self.env)

    def cpus_available(self) -> int:
        """CPUs the instance can really use: its shape's vCPUs; else, on its machine's kernel, that
        machine's CPUs; else what the instance reports (nproc)."""
        if self.env.shape.vcpus:
            return self.env.shape.vcpus
        if self.traits.shares_kernel:
            return self.machine.cpu_count()
        return self.vcpus

    def mark(self, phase: str, when: float | None = None) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown lifecycle phase {phase}")
        self.lifecycle[phase] = time.time() if when is None else when

    @property
    def vcpus(self) -> int:
        """vCPUs the instance is entitled to: the shape's, or what the instance reports."""
        if self.env.shape.vcpus:
            return self.env.shape.vcpus
        res = self.exec(["nproc"], timeout=30)
        return int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 1

    @property
    def torn_down(self) -> bool:
        """True once it is gone: torn down, or removed with its group (`mark_gone`)."""
        return self._torn_down

    def mark_gone(self) -> None:
        """Say it is gone without tearing it down: its group was removed as a whole."""
        self._torn_down = True

    def _gone(self, argv: Sequence[str]) -> ExecResult | None:
        """The result of a command sent to an instance already torn down (None while it is up)."""
        if not self._torn_down:
            return None
        now = time.time()
        return ExecResult([str(a) for a in argv], 125, "", f"instance {self.name} was torn down", now, now)

    @abstractmethod
    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        """Run an argument list (never a shell string) inside the instance."""

    @abstractmethod
    def bin(self, name: str) -> str:
        """Path, inside the instance, of one of virtbench's native kernels."""

    @abstractmethod
    def scratch_dir(self) -> str:
        """A writable directory inside the instance for temporary files."""

    def alive(self) -> bool:
        """Is the instance still there to run commands? The runner replaces dead ones."""
        return not self._torn_down

    def metadata(self) -> dict[str, Any]:
        """What every sample taken on this instance records about where it ran."""
        return {"driver": self.env.driver, "instance": self.name, "machine": self.machine.name}

    def teardown(self) -> None:
        """Destroy the instance; safe to call twice."""
        if self._torn_down:
            return
        self.mark("teardown_start")
        try:
            self._destroy()
        finally:
            self._torn_down = True
            self.mark("teardown_end")

    @abstractmethod
    def _destroy(self) -> None:
        """Driver-specific teardown."""


class GuestImageInstance(Instance):
    """An instance that runs the guest image (a container, a VM, a pod): virtbench's kernels are
    where the image put them."""

    def bin(self, name: str) -> str:
        return f"{GUEST_BIN_DIR}/{name}"


@dataclass
class Problem:
    """Something `doctor` reports: what is wrong and how to fix it."""

    what: str
    fix: str


@dataclass(frozen=True)
class ScratchSpace:
    """Where an environment's instances keep their temporary files, as a capacity check sees it."""

    what: str          # for messages (after "does not fit": "in the free space of /tmp"); "{free}" stands for the free bytes
    free: int          # bytes free there
    shared: bool       # True: all instances of the environment use this one space; False: each has its own


class Driver(ABC):
    """Makes instances of one kind."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    traits: ClassVar[Traits] = Traits()  # what its instances are (Instance.traits)

    @classmethod
    def traits_for(cls, env: EnvSpec) -> Traits:
        """What the instances of `env` are: the driver's traits, unless its options make them another
        kind (pods on a real cluster are not kube play's)."""
        return cls.traits
    options: ClassVar[dict[str, OptionSpec]] = {}
    needs_image: ClassVar[bool] = False
    supports_shapes: ClassVar[bool] = True  # False: the driver cannot limit vCPUs/memory
    # The kinds of leftover its instances can leave when a run is killed outright, each with its
    # finder (machines/ledger.py): the run's pool sweeps every machine it hands out with them.
    leftovers: ClassVar[tuple[ledger.Finder, ...]] = ()

    def __init__(self, context: DriverContext):
        self.context = context
        context.machines.enlist(self.leftovers)
        # What the run's sweeps removed (the pool's list, shared by the run's drivers): the runner
        # names each in the run's notes and empties it after each provision.
        self.stale_removed: list[str] = context.machines.removed

    @abstractmethod
    def check(self, env: EnvSpec | None = None) -> list[Problem]:
        """Can this driver run `env` from this machine (None: its default environment, as doctor
        asks)? Empty list means yes. check_env then checks the environment's own options."""

    @abstractmethod
    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        """Start `count` instances of env; all or none (tear down what started if one fails)."""

    # Memory of one instance without a memory shape (None: it shares its machine's, as a host does).
    default_memory_mb: ClassVar[int | None] = None

    @classmethod
    def scratch_space(cls, env: EnvSpec) -> ScratchSpace | None:
        """The space the instances of `env` would write temporary files to, before any starts
        (None: not known in advance; the workload finds out inside)."""
        return None

    @classmethod
    def swap_bytes(cls, env: EnvSpec) -> int:
        """Swap each instance of `env` gets beside its memory (0: none: an instance that outgrows its
        memory is killed, not slowed)."""
        return 0

    def check_env(self, env: EnvSpec) -> list[Problem]:
        """Problems with one environment's options that can be told before anything starts."""
        return []

    @classmethod
    def testbeds_used(cls, env: EnvSpec) -> list[Path]:
        """State directories of this machine's testbeds that env's instances would run on (a run
        registers there while it runs, so `down` will not remove them under it)."""
        return []

    @classmethod
    def option_problems(cls, options: Mapping[str, Any]) -> list[tuple[str, str, tuple | None]]:
        """(option, problem, valid choices) for option values that are wrong together or in form, beyond
        each option's own choices: the suite loader reports them at their file, line and key."""
        return []

    def plan(self, env: EnvSpec, count: int) -> list[str]:
        """What provisioning up to `count` instances of env at once will create, said before it is
        created; raises UserError when that is more than the driver allows (a cost guard)."""
        return []

    def close(self) -> None:
        """Make starts still in flight give up and remove what this driver started and nobody tore
        down (after a Ctrl-C); nothing to do for a driver whose instances are only the caller's."""

    def lifecycle_ops(self, env: EnvSpec) -> Any:
        """The operations `virtbench check` needs (a lifecycle.LifecycleOps), or None: the driver
        offers no lifecycle checks."""
        return None

    # -- the boot grid (`virtbench boot`): a cell is (image_size, image_mode, shape, concurrency) ----

    @classmethod
    def smallest_image(cls) -> int | None:
        """Bytes of the smallest disk image the driver boots (None: no floor); published sizes below
        it are raised to it."""
        return None

    def prepare_boot_cell(self, env: EnvSpec, params: Mapping[str, Any],
                          log: Callable[[str], None]) -> tuple[str | None, dict[str, Any]]:
        """Before a boot grid times anything: build what one cell needs (base disks, images), or say
        why the cell cannot run with this driver. (reason or None, facts for the run's record)."""
        return None, {}

    def boot_cell_driver(self, params: Mapping[str, Any]) -> "Driver":
        """The driver that starts a cell's instances: this one, or one over another image."""
        return self


@dataclass
class Fleet:
    """All instances the runner started, torn down together whatever happens."""

    instances: list[Instance] = field(default_factory=list)

    def add(self, items: list[Instance]) -> list[Instance]:
        self.instances.extend(items)
        return items

    def teardown(self) -> list[str]:
        errors = []
        for inst in reversed(self.instances):
            try:
                inst.teardown()
            except Exception as exc:  # keep tearing the rest down
                errors.append(f"{inst.name}: {exc}")
        self.instances.clear()
        return errors


# -- abilities: what some instances can do besides running commands ----------------------------------
# A caller checks once with isinstance(inst, Ability); a driver's instances implement the methods.

@runtime_checkable
class Rebootable(Protocol):
    """A driver that reboots several of its instances in one call (each really reboots)."""

    def reboot(self, instances: Sequence[Instance]) -> Any: ...


@runtime_checkable
class DiskHotplug(Protocol):
    """Takes disks while it runs, through its hypervisor's QMP connection (None once it is gone):
    remote block storage for a guest, a second disk for the attach check."""

    qmp: Any

    def attach_disk(self, size_bytes: int = ..., timeout: float = ...) -> dict[str, Any]: ...


@runtime_checkable
class Snapshotting(Protocol):
    """Copies its running disk to a standalone image; returns the seconds it was paused."""

    def snapshot_disk(self, dest: Path) -> float: ...


@runtime_checkable
class VolumeAttach(Protocol):
    """Gets a provider volume attached and mounted: (path inside, metadata, undo)."""

    def attach_volume(self, size: int | None) -> tuple[str, dict[str, Any], Any]: ...


@runtime_checkable
class GuestRelay(Protocol):
    """Relays a port inside the guest to an address outside it (a VM's guestfwd); None removes it."""

    def set_relay(self, port: int, target: tuple[str, int] | None) -> tuple[str, int]: ...


@runtime_checkable
class ClusterNetworking(Protocol):
    """A driver whose instances cannot reach each other by themselves (VMs on user-mode networking)
    joins them on a private segment: an address per instance."""

    def connect_cluster(self, instances: Sequence[Instance]) -> dict[str, Any]: ...


@runtime_checkable
class PortForwarding(Protocol):
    """A port inside it reached from this machine at another (address, port): a VM's hostfwd, a
    pod's NodePort Service."""

    def forward_port(self, port: int) -> tuple[str, int]: ...


@runtime_checkable
class ServiceBalancing(Protocol):
    """The platform's own balancer in front of a group's instances (a Kubernetes Service):
    (address, port, what a sample records of it)."""

    def service_endpoint(self, peers: Sequence[Instance], port: int) -> tuple[str, int, dict[str, Any]]: ...


@dataclass(frozen=True)
class HostSideScope:
    """Where the monitor reads a sandbox's CPU and memory on its machine: the cgroup of `pid` (a
    process of the sandbox there), and why not inside (said with every series it gives)."""

    pid: int
    why: str


@runtime_checkable
class HostSideMonitoring(Protocol):
    """Shows no CPU or memory counters inside (a gVisor sandbox: no cgroup files, zero CPU time in
    /proc/stat): the monitor reads them from its cgroup on its machine; None: it has them inside."""

    def host_side_scope(self) -> HostSideScope | None: ...


@runtime_checkable
class SharedNfsMount(Protocol):
    """Mounts the environment's NFS share itself (pods: a PersistentVolume); storage=nfs uses it:
    which backend mounts it, why it cannot (None: it can), and the instance's own directory on it."""

    backend_name: str

    @property
    def nfs_share(self) -> str: ...

    @property
    def nfs_refusal(self) -> str | None: ...

    def nfs_dir(self) -> str: ...
