"""This machine: commands are local processes (procs.run), files are copied with shutil; the
conveniences are `Machine`'s own."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import hostdirs, procs
from ..model import ExecResult
from .base import DirectForwards, Machine, Process

LOCAL_NAME = "localhost"


class _Spawner:
    """Runs calls on one daemon thread that lives as long as the process: PR_SET_PDEATHSIG fires
    when the *thread* that forked the child exits, and worker threads come and go."""

    def __init__(self) -> None:
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._q.get()
            try:
                box.append(fn())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box.append(exc)
            done.set()

    def call(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="virtbench-spawner", daemon=True)
                self._thread.start()
        box: list = []
        done = threading.Event()
        self._q.put((fn, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


_spawner = _Spawner()


def pdeathsig_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --` when util-linux has it: the child dies with its parent."""
    exe = shutil.which("setpriv")
    return [exe, "--pdeathsig", "KILL", "--"] if exe else []


class LocalMachine(Machine):
    """This machine: its primitives as local processes and file copies. The conveniences are
    Machine's own; what differs in meaning is declared: it is the controller (`is_local`: a path
    here is the file itself, a port here is reachable as it is), it has this process's own directory
    (`process_dir`), and what it spawns are this process's children (tied to it, reaped by it)."""

    kind = "local"
    is_local = True
    spawns_children = True
    poll_interval = 0.01
    process_dir = hostdirs.ProcessDir()
    forwards = DirectForwards()

    def __init__(self, name: str = LOCAL_NAME):
        super().__init__(name, "127.0.0.1")
        self._children: dict[int, subprocess.Popen] = {}

    @classmethod
    def from_host(cls, spec) -> LocalMachine:
        return cls(spec.name)  # this machine under the host's inventory name

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        return procs.run(argv, timeout=timeout, stdin=stdin, env=env, cwd=cwd)

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

    def read_text(self, path: str | Path) -> str:
        """The one convenience with a fast path here, for the loops that poll through it (a helper's
        log, the mount table, CPU lists): a `cat` costs ~2 ms of fork and exec, a read ~0.1 ms."""
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return ""

    # -- what differs in meaning here ------------------------------------------------------------

    def spawn_tethered(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None) -> Process:
        """A child of this process: it dies with it, even on SIGKILL (PR_SET_PDEATHSIG)."""
        return _spawner.call(lambda: self.spawn([*pdeathsig_prefix(), *argv], log, env=env))

    def exited(self, pgid: int) -> bool:
        """Has the process this machine spawned as `pgid` exited? Reaps it (no zombie stays); a
        wait-free check, where Process.alive() runs a command."""
        proc = self._children.get(pgid)
        return proc is None or proc.poll() is not None

    def free_port(self) -> int:
        """One free right now (the caller still retries: another process may take it meanwhile)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def private_workdir(self) -> str | None:
        path = Path(tempfile.gettempdir()) / f"virtbench-engine-{os.getuid()}"
        path.mkdir(mode=0o700, exist_ok=True)
        return str(path)


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
