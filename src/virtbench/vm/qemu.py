"""QEMU processes: command lines, a QMP client, the serial console reader, and safe spawning.

Every QEMU this module starts
- is spawned by one long-lived thread through `setpriv --pdeathsig KILL`, so it dies with virtbench
  even on SIGKILL (the kernel delivers the parent-death signal when the spawning *thread* exits);
- runs in its own process group, so teardown can kill the group;
- starts paused (-S) with QMP on a socket virtbench created and passed in by file descriptor, so
  the QMP greeting marks the moment the process exists (event, not polling), and `cont` marks the
  moment the vCPUs run;
- writes the guest's serial console to a pipe read by a thread that timestamps each line.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

QEMU = "qemu-system-x86_64"
PANIC_RE = re.compile(r"Kernel panic - not syncing|end Kernel panic")


# -- spawning -----------------------------------------------------------------------------------

class _Spawner:
    """Runs Popen on one daemon thread that lives as long as the process (see module docstring)."""

    def __init__(self) -> None:
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            argv, kwargs, box, done = self._q.get()
            try:
                box.append(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box.append(exc)
            done.set()

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="virtbench-vm-spawner", daemon=True)
                self._thread.start()
        box: list = []
        done = threading.Event()
        self._q.put((list(argv), kwargs, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


_spawner = _Spawner()


def pdeathsig_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --` when util-linux has it: the child dies with its parent."""
    exe = shutil.which("setpriv")
    return [exe, "--pdeathsig", "KILL", "--"] if exe else []


def spawn(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    kwargs.setdefault("start_new_session", True)
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return _spawner.popen([*pdeathsig_prefix(), *argv], **kwargs)


def kill_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM the process group, SIGKILL after `grace` seconds, and reap."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # The group may hold helpers even after the leader died.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# -- QMP ----------------------------------------------------------------------------------------

class QmpError(Exception):
    pass


class Qmp:
    """A minimal synchronous QMP client on a connected socket; events are kept with arrival times."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.file = sock.makefile("rwb", buffering=0)
        self.events: list[tuple[float, dict]] = []
        self.greeting: dict | None = None
        self.greeted_at: float | None = None
        self._lock = threading.Lock()

    def _read(self, timeout: float | None) -> dict:
        self.sock.settimeout(timeout)
        line = self.file.readline()
        if not line:
            raise QmpError("QEMU closed the QMP connection")
        return json.loads(line)

    def handshake(self, timeout: float = 60.0) -> float:
        """Wait for the greeting (QEMU is up); returns when it arrived."""
        self.greeting = self._read(timeout)
        self.greeted_at = time.time()
        self.execute("qmp_capabilities", timeout=timeout)
        return self.greeted_at

    def execute(self, command: str, arguments: dict | None = None, timeout: float = 30.0) -> Any:
        msg = {"execute": command, **({"arguments": arguments} if arguments else {})}
        with self._lock:
            self.sock.settimeout(timeout)
            self.file.write(json.dumps(msg).encode() + b"\n")
            deadline = time.monotonic() + timeout
            while True:
                reply = self._read(max(0.01, deadline - time.monotonic()))
                if "event" in reply:
                    self.events.append((time.time(), reply))
                    continue
                if "error" in reply:
                    raise QmpError(f"{command}: {reply['error'].get('desc', reply['error'])}")
                if "return" in reply:
                    return reply["return"]

    def event_time(self, name: str) -> float | None:
        """QEMU's own timestamp of the last event `name` (host clock, microseconds)."""
        for _, ev in reversed(self.events):
            if ev.get("event") == name:
                ts = ev.get("timestamp") or {}
                return ts.get("seconds", 0) + ts.get("microseconds", 0) / 1e6
        return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            self.sock.close()


# -- console ------------------------------------------------------------------------------------

@dataclass
class ConsoleLine:
    t: float
    text: str


class Console:
    """Reads the guest's serial console from a pipe; timestamps each line when it arrives."""

    def __init__(self, stream: BinaryIO, log_path: Path, tail: int = 400):
        self.stream = stream
        self.log_path = log_path
        self.lines: collections.deque[ConsoleLine] = collections.deque(maxlen=tail)
        self.markers: list[ConsoleLine] = []  # every VIRTBENCH-* line and kernel panic, whole run
        self.cond = threading.Condition()
        self.closed = False
        self._thread = threading.Thread(target=self._run, name=f"console-{log_path.parent.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with open(self.log_path, "ab") as log:
                for raw in iter(self.stream.readline, b""):
                    now = time.time()
                    text = raw.decode(errors="replace").rstrip("\r\n").replace("\r", "")
                    log.write(f"{now:.6f} {text}\n".encode())
                    log.flush()
                    with self.cond:
                        item = ConsoleLine(now, text)
                        self.lines.append(item)
                        if "VIRTBENCH-" in text or PANIC_RE.search(text):
                            self.markers.append(item)
                        self.cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self.cond:
                self.closed = True
                self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], Any], timeout: float) -> Any:
        """Wait until predicate() (called under the lock) returns something truthy, or timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = predicate()
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return predicate()
                self.cond.wait(min(left, 0.5))

    def find(self, prefix: str, after: int = 0) -> ConsoleLine | None:
        """The first marker line starting with `prefix` (e.g. VIRTBENCH-INIT) at index >= after."""
        for m in self.markers[after:]:
            if m.text.startswith(prefix + " ") or m.text == prefix:
                return m
        return None

    def failure(self, after: int = 0) -> ConsoleLine | None:
        for m in self.markers[after:]:
            if m.text.startswith("VIRTBENCH-FAIL") or PANIC_RE.search(m.text):
                return m
        return None

    def tail(self, n: int = 15) -> str:
        with self.cond:
            items = list(self.lines)[-n:]
        return "\n".join(i.text for i in items)

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


# -- command line -------------------------------------------------------------------------------

@dataclass
class Machine:
    """Everything that decides a QEMU command line."""

    name: str
    accel: str  # kvm | tcg
    machine: str  # pc | q35
    vcpus: int
    memory_mb: int
    kernel: Path
    initrd: Path
    append: str
    disk: Path | None
    disk_format: str = "raw"
    disk_model: str = "virtio"  # virtio | ide
    disk_cache: str = "none"
    nic_model: str = "virtio"  # virtio | e1000 | none
    ssh_port: int | None = None
    cpu: str | None = None
    rng: bool = True
    extra: list[str] = field(default_factory=list)

    def argv(self, qmp_fd: int, pidfile: Path | None = None) -> list[str]:
        argv = [QEMU, "-name", f"{self.name},debug-threads=on", "-machine", self.machine, "-accel", self.accel,
                "-smp", str(self.vcpus), "-m", str(self.memory_mb), "-nodefaults", "-no-user-config",
                "-display", "none", "-S",
                "-chardev", f"socket,id=qmp,fd={qmp_fd},server=on,wait=off", "-mon", "chardev=qmp,mode=control",
                "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
                "-kernel", str(self.kernel), "-initrd", str(self.initrd), "-append", self.append]
        if self.cpu:
            argv += ["-cpu", self.cpu]
        if pidfile:
            argv += ["-pidfile", str(pidfile)]
        if self.disk is not None:
            argv += ["-drive", f"file={_escape(str(self.disk))},format={self.disk_format},if=none,id=root,"
                               f"cache={self.disk_cache},discard=unmap"]
            if self.disk_model == "virtio":
                argv += ["-device", "virtio-blk-pci,drive=root"]
            elif self.disk_model == "ide":
                argv += ["-device", "ide-hd,drive=root,bus=ide.0"]
            else:
                raise ValueError(f"unknown disk model {self.disk_model}")
        if self.nic_model != "none":
            fwd = f",hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22" if self.ssh_port else ""
            # restrict=on: the guest reaches nothing outside; only the forwarded port reaches it.
            argv += ["-netdev", f"user,id=net0,restrict=on{fwd}"]
            if self.nic_model == "virtio":
                argv += ["-device", "virtio-net-pci,netdev=net0"]
            else:
                argv += ["-device", f"{self.nic_model},netdev=net0"]
        if self.rng:
            argv += ["-device", "virtio-rng-pci"]
        return argv + list(self.extra)


def _escape(value: str) -> str:
    """QEMU option values double a comma to mean a literal comma."""
    return value.replace(",", ",,")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the caller retries if QEMU loses the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def qmp_listener(path: Path) -> socket.socket:
    """A listening UNIX socket for QEMU to accept QMP on (passed by fd)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    return sock


def connect(path: Path) -> Qmp:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return Qmp(sock)


def version() -> str:
    exe = shutil.which(QEMU)
    if not exe:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"version (\S+)", out)
    return m.group(1) if m else out.strip().splitlines()[0] if out.strip() else ""
