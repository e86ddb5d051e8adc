"""This machine: commands are local processes (procs.run), files are copied with shutil, and the
file-system conveniences of `Machine` take their os/shutil fast paths."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import hostdirs, procs
from ..model import ExecResult
from .base import Machine, Process

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
    kind = "local"
    spawns_children = True
    poll_interval = 0.01

    def __init__(self, name: str = LOCAL_NAME):
        super().__init__(name, "127.0.0.1")
        self._children: dict[int, subprocess.Popen] = {}

    @classmethod
    def from_host(cls, spec) -> LocalMachine:
        return cls(spec.name)  # this machine under the host's inventory name

    @property
    def is_local(self) -> bool:
        return True

    @property
    def on(self) -> str:
        return ""

    @property
    def place(self) -> str:
        return "the host"

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

    def spawn_tethered(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None) -> Process:
        return _spawner.call(lambda: self.spawn([*pdeathsig_prefix(), *argv], log, env=env))

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

    # -- the file-system conveniences, without a process each --------------------------------------

    def read_text(self, path: str | Path) -> str:
        with contextlib.suppress(OSError):
            return Path(path).read_text(errors="replace")
        return ""

    def write_text(self, path: str | Path, text: str, mode: int | None = None) -> None:
        Path(path).write_text(text)
        if mode is not None:
            os.chmod(path, mode)

    def exists(self, path: str | Path) -> bool:
        return os.path.exists(path)

    def which(self, program: str) -> bool:
        return bool(shutil.which(program))

    def missing_programs(self, programs: Sequence[str]) -> list[str]:
        return [p for p in programs if not shutil.which(p)]

    def makedirs(self, path: str | Path) -> None:
        os.makedirs(path, exist_ok=True)

    def scratch_dir(self, kind: str) -> str:
        """Under this process's directory (hostdirs.base_dir), which tells a later run whose it was."""
        d = hostdirs.base_dir() / f"{kind}-{hostdirs.next_id()}"
        d.mkdir(mode=0o755)
        return str(d)

    def scratch_file(self, kind: str) -> str:
        return f"{hostdirs.base_dir()}/{kind}-{hostdirs.next_id()}.log"

    @contextlib.contextmanager
    def staged(self, src: Path) -> Iterator[str]:
        yield str(src)  # a command here reads the file where it is

    @contextlib.contextmanager
    def fetched(self, dest: Path) -> Iterator[str]:
        yield str(dest)

    def remember(self, kind: str, item: str) -> None:
        hostdirs.ledger(hostdirs.base_dir() / kind, add=item)

    def forget(self, kind: str, item: str) -> None:
        hostdirs.ledger(hostdirs.base_dir() / kind, remove=item)

    def remembered(self, kind: str) -> list[str]:
        return hostdirs.ledger(hostdirs.base_dir() / kind)

    def container_mount_dir(self, name: str) -> str | None:
        return hostdirs.prepare(name)

    def release_mount_dir(self, path: str | None) -> None:
        hostdirs.release(path)

    def remove(self, path: str | Path) -> None:
        with contextlib.suppress(OSError):
            os.unlink(path)

    def rmtree(self, path: str | Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def private_workdir(self) -> str | None:
        path = Path(tempfile.gettempdir()) / f"virtbench-engine-{os.getuid()}"
        path.mkdir(mode=0o700, exist_ok=True)
        return str(path)

    def is_root(self) -> bool:
        return os.geteuid() == 0

    def cpu_count(self) -> int:
        return os.cpu_count() or 1

    def allowed_cpus(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))

    def free_port(self) -> int:
        """One free right now (the caller still retries: another process may take it meanwhile)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def fsync(self, path: str | Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def file_size(self, path: str | Path) -> int:
        return os.stat(path).st_size

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
