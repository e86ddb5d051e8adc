"""The lifecycle checks' parts below the drivers: a check's result, an instance's boot identity, and
the operations a driver offers the checks (`LifecycleOps`, handed out by Driver.lifecycle_ops).
run/checks.py runs the checks; each driver's ops live beside it (drivers/vm/checks.py,
drivers/container/checks.py, drivers/cloud/checks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from .base import Instance
from ..model import EnvSpec

# The guest's boot id and the start time of its PID 1: a VM's boot id changes when it reboots; a
# container shares the host's, but its PID 1 is a new process after a restart.
IDENTITY = ["sh", "-c", "cat /proc/sys/kernel/random/boot_id; cut -d' ' -f22 /proc/1/stat"]


@dataclass
class CheckResult:
    name: str
    passed: bool | None
    detail: str
    seconds: float = 0.0
    skipped: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "passed": self.passed, "detail": self.detail, "seconds": round(self.seconds, 3)}
        if self.skipped:
            out["skipped"] = self.skipped
        if self.data:
            out["data"] = self.data
        return out


def identity(inst: Instance) -> str:
    res = inst.exec(IDENTITY, timeout=60)
    if not res.ok:
        raise UserError(f"{inst.name}: cannot read its boot identity: {res.describe_failure()}")
    return ":".join(res.stdout.split())


class LifecycleOps:
    """What `virtbench check` needs from a driver beyond the Driver interface; a driver hands one out
    from Driver.lifecycle_ops(). Subclasses live beside their drivers."""

    def __init__(self, driver, env: EnvSpec):
        self.driver = driver
        self.env = env

    def reboot(self, instances: list[Instance]) -> list[dict]:
        raise NotImplementedError

    def attach_disk(self, inst: Instance) -> tuple[bool | None, str, dict]:
        raise NotImplementedError

    def boot_from_snapshot(self, inst: Instance, tmp: Path) -> tuple[Instance | None, str, Callable[[], None]]:
        raise NotImplementedError

    # Checks of the driver's own (name -> fn(ready instances, log) -> CheckResult), run after the four.
    def extra_checks(self) -> dict[str, Callable[[list[Instance], Callable[[str], None]], "CheckResult"]]:
        return {}

    # A check of its own for snapshot_boot (fn(ready instances, log) -> CheckResult), or None.
    check_snapshot: Callable | None = None

    def api_only(self, instances: list[Instance]) -> str | None:
        """Why what happens inside these instances cannot be seen (then a check verifies the API path
        only, and says so); None when it can."""
        return None
