"""Conditions: what stands between an instance and its data or peers (storage target, delay, rate).

A condition is applied by the runner around a workload's repetitions, never by the workload. It
can hand the workload a storage directory per instance and a route (host, port) -> (host, port)
that passes through, e.g., a delay proxy; and it reports what it measured (the delay really added).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from ..machines import Machine
from ..model import EnvSpec, ExecResult


class Instance(Protocol):
    """What conditions use of a driver's instance. A Protocol, not drivers.base.Instance: conditions
    then depend on machines and model only, and any driver's instance fits without importing us."""

    name: str
    env: EnvSpec
    address: str | None
    machine: Machine  # where the instance runs: conditions act through this machine's executor
    host_mount_dir: str | None  # a directory of its machine it sees (bind-mounted), if any
    engine: Any  # the container engine it runs under (cmd, cli()), None for other kinds

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult: ...

    def scratch_dir(self) -> str: ...


class VolumeInstance(Instance, Protocol):
    """An instance that can get a volume of its own (a cloud instance): storage=cloud-volume."""

    def attach_volume(self, size: int | None) -> tuple[str, dict[str, Any], Callable[[], None]]:
        """Make, attach and mount a volume: (directory as the instance sees it, metadata, undo)."""
        ...


class Applied:
    """The conditions in force for a block of repetitions, and how to undo them."""

    def __init__(self) -> None:
        self.metadata: dict[str, Any] = {}  # recorded with every sample: mechanism, measured values
        self._storage: dict[str, str] = {}  # instance name -> directory inside that instance
        self._routers: list[Callable[[str, int], tuple[str, int]]] = []
        self._cleanups: list[Callable[[], None]] = []

    def set_storage(self, instance: Instance, path: str) -> None:
        self._storage[instance.name] = path

    def storage_dir(self, instance: Instance) -> str:
        """Where a disk workload on `instance` writes: the storage target, or the instance's scratch dir."""
        return self._storage.get(instance.name) or instance.scratch_dir()

    def add_router(self, router: Callable[[str, int], tuple[str, int]]) -> None:
        self._routers.append(router)

    @property
    def routed(self) -> bool:
        """Does a network condition (delay, rate) stand between clients and servers of this cell?"""
        return bool(self._routers)

    def route(self, host: str, port: int) -> tuple[str, int]:
        """The address a client should dial to reach (host, port) under these conditions."""
        for router in self._routers:
            host, port = router(host, port)
        return host, port

    def defer(self, cleanup: Callable[[], None]) -> None:
        self._cleanups.append(cleanup)

    def close(self) -> list[str]:
        """Undo everything, last applied first; report what failed instead of stopping."""
        errors = []
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        return errors


class Condition(ABC):
    key: ClassVar[str]
    help: ClassVar[str]
    order: ClassVar[int] = 50  # network conditions first (low), storage after (it may route through them)

    @abstractmethod
    def coerce(self, raw: Any) -> Any:
        """Suite value -> typed value; ValueError saying why not."""

    def is_noop(self, value: Any) -> bool:
        """True when the value asks for nothing (e.g. delay 0, storage 'local')."""
        return False

    @abstractmethod
    def apply(self, value: Any, instances: dict[str, list[Instance]], applied: Applied,
              condition: dict[str, Any]) -> None:
        """Make the condition true for these instances; register cleanups on `applied`.
        Raise ConditionUnavailable when this machine cannot do it."""
