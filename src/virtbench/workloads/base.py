"""The workload interface: parameters, the instances it needs, its command, and a pure parser.

A workload never starts or stops instances; the runner hands it running ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..conditions.base import Applied
from ..drivers.base import Instance
from ..errors import WorkloadFailed
from ..model import Sample


@dataclass(frozen=True)
class Param:
    """One workload parameter. A list default means 'sweep these values'."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None

    def coerce(self, raw: Any) -> Any:
        """Turn a suite/CLI value into this parameter's type, or raise ValueError saying why."""
        try:
            if self.type is bool and isinstance(raw, str):
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                value = raw.lower() in ("true", "1", "yes")
            elif self.type is bool:
                value = bool(raw)
            elif self.type is int and isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            else:
                value = self.type(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{raw!r} is not a valid {self.type.__name__}") from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(map(str, self.choices))}")
        if self.min is not None and value < self.min:
            raise ValueError(f"{value} is below the minimum {self.min}")
        if self.max is not None and value > self.max:
            raise ValueError(f"{value} is above the maximum {self.max}")
        return value

    def default_values(self) -> list[Any]:
        return list(self.default) if isinstance(self.default, (list, tuple)) else [self.default]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str
    higher_is_better: bool
    help: str = ""


@dataclass
class RunContext:
    """What a workload may know about the repetition it is running."""

    timeout: float
    condition: dict[str, Any] = field(default_factory=dict)
    repetition: int = 0
    applied: Applied = field(default_factory=Applied)  # storage dirs and routes of the conditions

    def storage_dir(self, instance: Instance) -> str:
        return self.applied.storage_dir(instance)


class Workload(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    # Published baselines for an index (score / baseline x 10), by metric name.
    index_baselines: ClassVar[dict[str, float]] = {}
    # The parameter that enumerates the indexed tests (left out when grouping tests into one index).
    index_param: ClassVar[str | None] = None
    # A sample metadata key that is part of a result row's identity (MPI: the message size), so each
    # value gets its own CI and stopping rule.
    series_key: ClassVar[str | None] = None
    # False for a workload another command runs (boot: `virtbench boot`); suites and --workload refuse it.
    suite_runnable: ClassVar[bool] = True

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def validate(self, params: dict[str, Any]) -> None:
        """Checks across parameters; raise ValueError naming the parameter."""

    def check_capacity(self, params: dict[str, Any], env: Any) -> list[str]:
        """Why this cell cannot fit environment `env` (an EnvSpec) on this machine; [] if it fits.
        Checked for every cell before anything starts."""
        return []

    def roles(self, params: dict[str, Any]) -> dict[str, int]:
        """How many instances of each role one repetition needs."""
        return {"main": 1}

    def timeout(self, params: dict[str, Any]) -> float:
        """Seconds one repetition may take before it is killed and recorded as a failure."""
        return 600.0

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        """The model of how long one repetition runs, for the plan a run prints before it starts
        (run/estimates.py prefers this machine's earlier samples); None when unknown. Default: its
        `duration` or `runtime` parameter; workloads that run to completion model their problem size."""
        for key in ("duration", "runtime"):
            value = params.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return float(value)
        return None

    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        """Run one repetition and return its raw output. Default: one command on the main instance."""
        inst = instances["main"][0]
        res = inst.exec(self.command(inst, params, ctx), timeout=ctx.timeout)
        if not res.ok:
            raise WorkloadFailed(res.describe_failure(), res.stdout[-4000:] + res.stderr[-4000:])
        return res.stdout

    def command(self, instance: Instance, params: dict[str, Any], ctx: RunContext) -> list[str]:
        raise NotImplementedError(f"{self.name} overrides execute() instead")

    @abstractmethod
    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        """Pure: raw output -> samples. Raise ValueError on output it cannot read."""

    def summarize_metadata(self, metas: list[dict[str, Any]]) -> dict[str, Any]:
        """Pure: what a result row should say about its samples' metadata beyond what they all share
        (e.g. per-pass medians); analysis adds it to the row's metadata."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "params": [{"name": p.name, "type": p.type.__name__, "default": p.default, "help": p.help,
                        "choices": list(p.choices) if p.choices else None} for p in self.params],
            "metrics": [{"name": m.name, "unit": m.unit, "higher_is_better": m.higher_is_better,
                         "help": m.help} for m in self.metrics],
        }
