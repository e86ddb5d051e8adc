"""This machine: commands are local processes (procs.run), files are copied with shutil."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import procs
from ..model import ExecResult
from .base import Machine, Process

LOCAL_NAME = "localhost"


class LocalMachine(Machine):
    kind = "local"

    def __init__(self, name: str = LOCAL_NAME):
        super().__init__(name, "127.0.0.1")
        self._children: dict[int, subprocess.Popen] = {}

    @property
    def is_local(self) -> bool:
        return True

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        return procs.run(argv, timeout=timeout, stdin=stdin, env=env, cwd=cwd)

    def connect(self) -> None:
        """Nothing to open: this machine is always there."""

    def put(self, src: Path, dest: str, mode: int | None = None) -> None:
        shutil.copyfile(src, dest)
        if mode is not None:
            os.chmod(dest, mode)

    def get(self, src: str, dest: Path) -> None:
        shutil.copyfile(src, dest)

    def spawn(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        full_env = {**os.environ, **env} if env else None
        with open(log, "ab") as out:
            proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=full_env, cwd=cwd, start_new_session=True)
        self._children[proc.pid] = proc
        return Process(self, proc.pid, log, [str(a) for a in argv])

    # Forwards: what listens here is already reachable here.
    def forward(self, remote_host: str, remote_port: int) -> tuple[str, int]:
        return remote_host, remote_port

    def forward_unix(self, remote_path: str) -> str:
        return remote_path

    def cancel_forward(self, local: tuple[str, int] | str) -> None:
        """Nothing was added."""

    def exited(self, pgid: int) -> bool:
        """Has the process this machine spawned as `pgid` exited? Reaps it (no zombie stays); a
        wait-free check, where Process.alive() runs a command."""
        proc = self._children.get(pgid)
        return proc is None or proc.poll() is not None

    def kill_group(self, pgid: int, grace: float = 2.0) -> None:
        proc = self._children.pop(pgid, None)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if proc is not None and proc.poll() is not None:
                    break
                if proc is None and not _group_alive(pgid):
                    break
                time.sleep(0.02)
            else:
                continue
            break
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


_local: LocalMachine | None = None


def local() -> LocalMachine:
    """The one LocalMachine of this process."""
    global _local
    if _local is None:
        _local = LocalMachine()
    return _local
