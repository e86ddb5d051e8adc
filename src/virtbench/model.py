"""Plain data passed between the runner, drivers, workloads and the store."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Shape:
    """How big an instance is. None means 'whatever the platform gives' (the host's own size)."""

    name: str
    vcpus: int | None = None
    memory_mb: int | None = None
    disk_gb: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "vcpus": self.vcpus, "memory_mb": self.memory_mb, "disk_gb": self.disk_gb}


@dataclass(frozen=True)
class EnvSpec:
    """One column of the comparison: a driver, a shape and driver options, under a name."""

    name: str
    driver: str
    shape: Shape
    options: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "driver": self.driver, "shape": self.shape.as_dict(), "options": dict(self.options)}


@dataclass
class Sample:
    """One measured value. Parsers return these; the runner adds run context and stores them."""

    metric: str
    value: float
    unit: str
    higher_is_better: bool
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.value = float(self.value)
        if math.isnan(self.value) or math.isinf(self.value):
            raise ValueError(f"sample {self.metric} has a non-finite value {self.value}")


@dataclass
class ExecResult:
    """What one command run inside an instance produced."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    started: float
    ended: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def describe_failure(self) -> str:
        """One line for a failure record: why, plus the tail of stderr."""
        if self.timed_out:
            head = f"timed out after {self.seconds:.1f} s"
        elif self.returncode < 0:
            head = f"killed by signal {-self.returncode}"
        elif self.returncode == 137:
            head = "killed (exit 137: SIGKILL, often the OOM killer or a stopped container)"
        else:
            head = f"exit status {self.returncode}"
        tail = self.stderr.strip().splitlines()[-3:]
        return head + (": " + " | ".join(tail) if tail else "")
