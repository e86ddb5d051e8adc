"""The environment driver interface: turn an EnvSpec into running instances and back into nothing.

Drivers know nothing about workloads. Workloads only see `Instance`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..machines import Machine, Pool, local
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


class Instance(ABC):
    """One running machine-like thing that can run argument lists."""

    def __init__(self, name: str, env: EnvSpec, role: str = "main", index: int = 0):
        self.name = name
        self.env = env
        self.role = role
        self.index = index
        self.lifecycle: dict[str, float] = {}
        self.address: str | None = None  # reachable IP for peers, when the driver knows one
        self.machine: Machine = local()  # the machine the instance runs on (drivers set theirs)
        self._torn_down = False

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
    def copy_in(self, src: Path, dest: str) -> None:
        """Copy a local file into the instance."""

    @abstractmethod
    def copy_out(self, src: str, dest: Path) -> None:
        """Copy a file from the instance to the local machine."""

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


@dataclass
class Problem:
    """Something `doctor` reports: what is wrong and how to fix it."""

    what: str
    fix: str


class Driver(ABC):
    """Makes instances of one kind."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    options: ClassVar[dict[str, OptionSpec]] = {}
    needs_image: ClassVar[bool] = False
    supports_shapes: ClassVar[bool] = True  # False: the driver cannot limit vCPUs/memory

    def __init__(self, context: DriverContext):
        self.context = context
        # Leftovers of killed runs removed on remote machines, which are swept when first used (the
        # runner reports and empties this after each provision).
        self.stale_removed: list[str] = []

    @abstractmethod
    def check(self) -> list[Problem]:
        """Can this driver work on this machine? Empty list means yes."""

    @abstractmethod
    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        """Start `count` instances of env; all or none (tear down what started if one fails)."""

    def check_env(self, env: EnvSpec) -> list[Problem]:
        """Problems with one environment's options that can be told before anything starts."""
        return []

    def plan(self, env: EnvSpec, count: int) -> list[str]:
        """What provisioning up to `count` instances of env at once will create, said before it is
        created; raises UserError when that is more than the driver allows (a cost guard)."""
        return []

    def cleanup_stale(self) -> list[str]:
        """Remove leftovers of earlier, killed runs (e.g. containers labelled as virtbench's)."""
        return []


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
