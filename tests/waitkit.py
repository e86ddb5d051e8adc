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


class Watcher:
    """A thread that calls `tick()` every `interval` seconds while a test runs (a `with` block), until
    the block ends or tick() returns True: for watching processes come and go during a run."""

    interval = 0.05

    def __init__(self):
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            if self.tick():
                return

    def tick(self) -> bool | None:
        raise NotImplementedError
