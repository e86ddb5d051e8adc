"""Wait on a condition instead of a fixed sleep: on a busy machine a killed process takes longer to
go and a started one longer to begin, and a sleep that is enough on a quiet machine is not there."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def until(check: Callable[[], T], timeout: float = 10.0, step: float = 0.05) -> T:
    """check() again until it returns something true or `timeout` seconds have passed; its last value.
    Assert on the result: a process that should be gone and lives on (or one that never starts) still
    fails, only later."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() >= deadline:
            return got
        time.sleep(step)
