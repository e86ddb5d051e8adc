"""A machine that runs nothing, for unit tests of code that acts through a Machine (as hyperfine's
mock executor lets its scheduler be tested): every call is recorded, and commands are answered by
rules the test sets. The file-system conveniences are Machine's own `sh -c` implementations, so a
test sees the very commands a remote machine would get."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..model import ExecResult
from .base import Machine, Process

Match = tuple[str, ...] | Callable[[list[str]], bool]
Reply = ExecResult | Callable[[list[str], bytes | None], ExecResult]


def result(argv: Sequence[str], stdout: str = "", returncode: int = 0, stderr: str = "") -> ExecResult:
    now = time.time()
    return ExecResult([str(a) for a in argv], returncode, stdout, stderr, now, now)


class RecordingMachine(Machine):
    """Records ("run", argv, stdin), ("put", src, dest), ("get", src, dest), ("spawn", argv, log) and
    ("kill_group", pgid) in `calls`; answers a command by the first rule it matches (an argv prefix,
    or a predicate), else with success and no output."""

    kind = "fake"

    def __init__(self, name: str = "fake", *, facts: Mapping[str, Any] | None = None):
        super().__init__(name, None)
        self.calls: list[tuple] = []
        self._rules: list[tuple[Match, Reply]] = []
        self._next_pgid = 1000
        if facts is not None:
            self._facts = {"arch": "x86_64", "kernel": "", "hostname": name, "cpu_model": "", "home": "/root",
                           "cores": None, "memory_mb": None, **facts}

    def answer(self, match: Match, stdout: str = "", returncode: int = 0, stderr: str = "",
           reply: Callable[[list[str], bytes | None], ExecResult] | None = None) -> RecordingMachine:
        """Answer commands that start with the tuple `match` (or satisfy it, when callable)."""
        self._rules.append((match, reply or (lambda argv, _stdin: result(argv, stdout, returncode, stderr))))
        return self

    def commands(self) -> list[list[str]]:
        """The argument lists run so far, in order."""
        return [c[1] for c in self.calls if c[0] == "run"]

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        self.calls.append(("run", argv, stdin))
        for match, reply in self._rules:
            hit = match(argv) if callable(match) else tuple(argv[:len(match)]) == tuple(match)
            if hit:
                return reply(argv, stdin) if callable(reply) else reply
        return result(argv)

    def put(self, src: Path, dest: str, mode: int | None = None) -> None:
        self.calls.append(("put", str(src), dest))

    def get(self, src: str, dest: Path) -> None:
        self.calls.append(("get", src, str(dest)))

    def spawn(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        self._next_pgid += 1
        self.calls.append(("spawn", [str(a) for a in argv], log))
        return Process(self, self._next_pgid, log, [str(a) for a in argv])

    def kill_group(self, pgid: int, grace: float = 2.0) -> None:
        self.calls.append(("kill_group", pgid))
